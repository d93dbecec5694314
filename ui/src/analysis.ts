// Views computed from one trace, all in O(n) over its spans (plus sorting what is shown):
// statistics grouped by service, operation or attribute (Jaeger UI's Trace Statistics), the tree
// of merged service+operation paths (the flame graph and the comparison of two traces), and the
// services of the trace with the calls between them.

import { valueString } from './api';
import { Trace } from './model';

// --- statistics --------------------------------------------------------------------------------

/** What spans are grouped by: `service`, `operation` (the span name) or `attr:<key>` (a span
 * attribute, else a resource attribute, of that key). */
export type GroupBy = string;

export interface StatRow {
  /** the group's value; spans without the attribute are grouped under `without <key>` */
  value: string;
  count: number;
  /** ns */
  total: number;
  min: number;
  max: number;
  selfTotal: number;
  selfMin: number;
  selfMax: number;
  errors: number;
  /** second-level groups, with `sub` */
  children: StatRow[] | null;
}

export function groupLabel(g: GroupBy): string {
  if (g === 'service') return 'Service';
  if (g === 'operation') return 'Operation';
  return g.startsWith('attr:') ? g.slice(5) : g;
}

/** Returns a function giving span i's value for the grouping. */
function grouper(t: Trace, g: GroupBy): (i: number) => string {
  const spans = t.spans;
  if (g === 'service') return (i) => spans[i].service;
  if (g === 'operation') return (i) => spans[i].name;
  const key = g.startsWith('attr:') ? g.slice(5) : g;
  const missing = `without ${key}`;
  // resource attributes are shared by many spans: look each resource up once
  const byResource = t.resources.map((attrs) => {
    for (const kv of attrs) if (kv.key === key) return valueString(kv.value);
    return missing;
  });
  return (i) => {
    const sp = spans[i];
    for (const kv of sp.attrs) if (kv.key === key) return valueString(kv.value);
    return byResource[sp.resource] ?? missing;
  };
}

function newRow(value: string): StatRow {
  return { value, count: 0, total: 0, min: Infinity, max: -Infinity, selfTotal: 0, selfMin: Infinity, selfMax: -Infinity, errors: 0, children: null };
}

function addTo(r: StatRow, dur: number, self: number, err: boolean) {
  r.count++;
  r.total += dur;
  if (dur < r.min) r.min = dur;
  if (dur > r.max) r.max = dur;
  r.selfTotal += self;
  if (self < r.selfMin) r.selfMin = self;
  if (self > r.selfMax) r.selfMax = self;
  if (err) r.errors++;
}

/** Spans grouped by `by`, and within each group by `sub` when given. */
export function traceStats(t: Trace, self: Float64Array, by: GroupBy, sub: GroupBy | null): StatRow[] {
  const g1 = grouper(t, by);
  const g2 = sub ? grouper(t, sub) : null;
  const groups = new Map<string, StatRow>();
  const subGroups = new Map<StatRow, Map<string, StatRow>>();
  const spans = t.spans;
  for (let i = 0; i < spans.length; i++) {
    const sp = spans[i];
    const v = g1(i);
    let r = groups.get(v);
    if (!r) groups.set(v, (r = newRow(v)));
    addTo(r, sp.dur, self[i], sp.error);
    if (g2) {
      let m = subGroups.get(r);
      if (!m) subGroups.set(r, (m = new Map()));
      const w = g2(i);
      let s = m.get(w);
      if (!s) m.set(w, (s = newRow(w)));
      addTo(s, sp.dur, self[i], sp.error);
    }
  }
  for (const [r, m] of subGroups) r.children = Array.from(m.values());
  return Array.from(groups.values());
}

/** Attribute keys of the trace's spans and resources, with the number of spans that have each. */
export function attributeKeys(t: Trace): { key: string; spans: number }[] {
  const counts = new Map<string, number>();
  const resKeys = t.resources.map((attrs) => attrs.map((kv) => kv.key));
  const resCount = new Map<number, number>();
  for (const sp of t.spans) {
    for (const kv of sp.attrs) counts.set(kv.key, (counts.get(kv.key) || 0) + 1);
    resCount.set(sp.resource, (resCount.get(sp.resource) || 0) + 1);
  }
  for (const [ri, n] of resCount) for (const k of resKeys[ri] || []) counts.set(k, (counts.get(k) || 0) + n);
  counts.delete('service.name');
  return Array.from(counts, ([key, spans]) => ({ key, spans })).sort((a, b) => a.key.localeCompare(b.key));
}

// --- merged paths ------------------------------------------------------------------------------

/** A node of the path tree: every span reached by the same chain of service+operation names
 * from a root, merged. */
export interface PathNode {
  service: string;
  name: string;
  parent: PathNode | null;
  /** -1 for the virtual root, 0 for the trace's roots */
  depth: number;
  count: number;
  /** summed duration and self time of the merged spans, ns */
  total: number;
  self: number;
  errors: number;
  children: PathNode[];
  /** children by `service\u0000name`, built once a node has many children */
  byKey: Map<string, PathNode> | null;
}

/** The names from the root down to `n`, joined by " › " ("service: operation" each). */
export function pathOf(n: PathNode): string {
  const parts: string[] = [];
  for (let x: PathNode | null = n; x && x.depth >= 0; x = x.parent) parts.push(`${x.service}: ${x.name}`);
  return parts.reverse().join(' › ');
}

const LINEAR_CHILDREN = 8;

/** The child of `n` for a service and operation, if any. A scan while there are few children (most
 * nodes are leaves, and a map each would cost more than the whole tree walk for 100,000 spans). */
export function childOf(n: PathNode, service: string, name: string): PathNode | undefined {
  const c = n.children;
  if (c.length <= LINEAR_CHILDREN) {
    for (const x of c) if (x.name === name && x.service === service) return x;
    return undefined;
  }
  if (!n.byKey) {
    n.byKey = new Map();
    for (const x of c) n.byKey.set(`${x.service}\u0000${x.name}`, x);
  }
  return n.byKey.get(`${service}\u0000${name}`);
}

function addChild(parent: PathNode, service: string, name: string): PathNode {
  const node: PathNode = { service, name, parent, depth: parent.depth + 1, count: 0, total: 0, self: 0, errors: 0, children: [], byKey: null };
  parent.children.push(node);
  if (parent.byKey) parent.byKey.set(`${service}\u0000${name}`, node);
  return node;
}

/** The tree of merged service+operation paths under a virtual root (depth -1) whose count and
 * total are those of the trace's roots. Children are in the order their first span starts. */
export function pathTree(t: Trace, self: Float64Array): PathNode {
  const root: PathNode = { service: '', name: '', parent: null, depth: -1, count: 0, total: 0, self: 0, errors: 0, children: [], byKey: null };
  const spans = t.spans;
  const nodeOf: PathNode[] = new Array(spans.length);
  for (let k = 0; k < t.order.length; k++) {
    const i = t.order[k];
    const sp = spans[i];
    const parent = sp.parent >= 0 ? nodeOf[sp.parent] : root;
    const node = childOf(parent, sp.service, sp.name) || addChild(parent, sp.service, sp.name);
    node.count++;
    node.total += sp.dur;
    node.self += self[i];
    if (sp.error) node.errors++;
    nodeOf[i] = node;
    if (sp.parent < 0) {
      root.count++;
      root.total += sp.dur;
    }
  }
  return root;
}

// --- services of one trace -----------------------------------------------------------------------

export interface TraceGraph {
  services: { name: string; spans: number; errors: number }[];
  /** a call: a span whose parent belongs to another service */
  edges: { from: string; to: string; calls: number; errors: number; total: number }[];
}

export function traceGraph(t: Trace): TraceGraph {
  const spans = t.spans;
  const svc = new Map<string, { name: string; spans: number; errors: number }>();
  const edges = new Map<string, { from: string; to: string; calls: number; errors: number; total: number }>();
  for (const sp of spans) {
    let s = svc.get(sp.service);
    if (!s) svc.set(sp.service, (s = { name: sp.service, spans: 0, errors: 0 }));
    s.spans++;
    if (sp.error) s.errors++;
    if (sp.parent < 0) continue;
    const from = spans[sp.parent].service;
    if (from === sp.service) continue;
    const key = `${from}\u0000${sp.service}`;
    let e = edges.get(key);
    if (!e) edges.set(key, (e = { from, to: sp.service, calls: 0, errors: 0, total: 0 }));
    e.calls++;
    e.total += sp.dur;
    if (sp.error) e.errors++;
  }
  return { services: Array.from(svc.values()), edges: Array.from(edges.values()) };
}
