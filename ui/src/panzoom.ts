// Zoom and pan for an SVG drawing: the drawing fits its box at first; the +, − and Fit buttons,
// Ctrl/⌘ + wheel (or a pinch) and the keys + − 0 and the arrows zoom and move it; dragging
// pans. Only the viewBox changes, so the drawing stays sharp and its elements keep their
// events (a drag does not click what it started on).

import { h } from './dom';

export interface View {
  x: number;
  y: number;
  w: number;
  h: number;
}

export interface PanZoom {
  el: HTMLElement;
  fit(): void;
  zoom(factor: number): void;
  view(): View | null;
}

/** Wraps `root`, a drawing of `w`×`hUser` user units, in a box `height` pixels tall; `initial`
 * is a view to start from (else the whole drawing); `changed` hears each new view (null: fit). */
export function panZoom(root: SVGSVGElement, w: number, hUser: number, height: number, initial: View | null, changed: (v: View | null) => void): PanZoom {
  const fitView: View = { x: 0, y: 0, w, h: hUser };
  let view: View | null = initial;
  root.setAttribute('preserveAspectRatio', 'xMidYMid meet');
  root.setAttribute('width', '100%');
  root.setAttribute('height', String(height));
  root.removeAttribute('style');

  const apply = () => {
    const v = view || fitView;
    root.setAttribute('viewBox', `${v.x.toFixed(1)} ${v.y.toFixed(1)} ${v.w.toFixed(1)} ${v.h.toFixed(1)}`);
    el.dataset.zoom = view ? (fitView.w / view.w).toFixed(3) : 'fit';
  };
  const set = (v: View | null) => {
    view = v;
    apply();
    changed(view);
  };
  /** The drawing's point under client coordinates. */
  const toUser = (cx: number, cy: number) => {
    const m = root.getScreenCTM();
    if (!m) return { x: 0, y: 0 };
    const p = new DOMPoint(cx, cy).matrixTransform(m.inverse());
    return { x: p.x, y: p.y };
  };
  const current = (): View => {
    const v = view || fitView;
    // the visible area: with "meet" the box shows more than the viewBox on one axis
    const r = root.getBoundingClientRect();
    if (!r.width || !r.height) return { ...v };
    const s = Math.min(r.width / v.w, r.height / v.h);
    const vw = r.width / s;
    const vh = r.height / s;
    return { x: v.x - (vw - v.w) / 2, y: v.y - (vh - v.h) / 2, w: vw, h: vh };
  };
  const zoomAt = (factor: number, ux?: number, uy?: number) => {
    const v = current();
    const minW = Math.min(fitView.w, 240);
    const maxW = Math.max(fitView.w, v.w) * 1.5;
    const nw = Math.min(maxW, Math.max(minW, v.w / factor));
    const f = v.w / nw;
    const cx = ux ?? v.x + v.w / 2;
    const cy = uy ?? v.y + v.h / 2;
    set({ x: cx - (cx - v.x) / f, y: cy - (cy - v.y) / f, w: nw, h: v.h / f });
  };
  const pan = (dx: number, dy: number) => {
    const v = current();
    set({ x: v.x + dx, y: v.y + dy, w: v.w, h: v.h });
  };

  const btn = (label: string, title: string, testid: string, f: () => void) => {
    const b = h('button', { class: 'btn small', type: 'button', title, 'aria-label': title, 'data-testid': testid }, label);
    b.addEventListener('click', f);
    return b;
  };
  const tools = h(
    'div',
    { class: 'panzoom-tools' },
    h('span', { class: 'muted small panzoom-hint' }, 'Drag to pan · Ctrl+scroll to zoom'),
    btn('−', 'Zoom out (−)', 'zoom-out', () => zoomAt(1 / 1.4)),
    btn('+', 'Zoom in (+)', 'zoom-in', () => zoomAt(1.4)),
    btn('Fit', 'Fit to the card (0)', 'zoom-fit', () => set(null)),
  );
  const el = h('div', { class: 'panzoom', tabindex: 0, 'data-testid': 'graph-viewport', 'aria-label': 'Service graph: drag to pan, + and − to zoom, 0 to fit' }, tools, root);

  root.addEventListener(
    'wheel',
    (ev) => {
      if (!ev.ctrlKey && !ev.metaKey) return; // plain scrolling scrolls the page
      ev.preventDefault();
      const p = toUser(ev.clientX, ev.clientY);
      zoomAt(Math.exp(-ev.deltaY * 0.0025), p.x, p.y);
    },
    { passive: false },
  );
  let drag: { x: number; y: number; v: View; moved: boolean; id: number } | null = null;
  let suppressClick = false;
  root.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0) return;
    drag = { x: ev.clientX, y: ev.clientY, v: current(), moved: false, id: ev.pointerId };
  });
  root.addEventListener('pointermove', (ev) => {
    if (!drag) return;
    const dx = ev.clientX - drag.x;
    const dy = ev.clientY - drag.y;
    if (!drag.moved && Math.hypot(dx, dy) < 4) return;
    if (!drag.moved) {
      drag.moved = true;
      root.setPointerCapture(drag.id);
      el.classList.add('panning');
    }
    const r = root.getBoundingClientRect();
    const s = drag.v.w / r.width;
    set({ x: drag.v.x - dx * s, y: drag.v.y - dy * s, w: drag.v.w, h: drag.v.h });
  });
  const end = () => {
    if (drag?.moved) suppressClick = true;
    drag = null;
    el.classList.remove('panning');
  };
  root.addEventListener('pointerup', end);
  root.addEventListener('pointercancel', end);
  // a drag ends with a click on what it started on: not a click
  el.addEventListener(
    'click',
    (ev) => {
      if (!suppressClick) return;
      suppressClick = false;
      ev.stopPropagation();
      ev.preventDefault();
    },
    true,
  );
  el.addEventListener('keydown', (ev) => {
    if (ev.target !== el || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    const v = current();
    const k = ev.key;
    if (k === '+' || k === '=') zoomAt(1.4);
    else if (k === '-' || k === '_') zoomAt(1 / 1.4);
    else if (k === '0') set(null);
    else if (k === 'ArrowLeft') pan(-v.w * 0.1, 0);
    else if (k === 'ArrowRight') pan(v.w * 0.1, 0);
    else if (k === 'ArrowUp') pan(0, -v.h * 0.1);
    else if (k === 'ArrowDown') pan(0, v.h * 0.1);
    else return;
    ev.preventDefault();
  });
  apply();
  return { el, fit: () => set(null), zoom: (f) => zoomAt(f), view: () => view };
}

/** A view as the URL holds it: "x,y,w,h" in whole user units. */
export function viewParam(v: View | null): string {
  return v ? [v.x, v.y, v.w, v.h].map((n) => Math.round(n)).join(',') : '';
}

export function parseView(s: string | null): View | null {
  const n = (s || '').split(',').map(Number);
  return n.length === 4 && n.every(isFinite) && n[2] > 0 && n[3] > 0 ? { x: n[0], y: n[1], w: n[2], h: n[3] } : null;
}
