//! The web UI, embedded at build time (`build.rs`): `ui/dist/index.html` for every page route,
//! the other files under `/assets/`. Page routes are real paths (`/search`, `/trace/<id>`,
//! `/graph`), so every view has a URL; the page itself reads them.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

include!(concat!(env!("OUT_DIR"), "/ui_files.rs"));

/// Shown when the binary was built without `ui/dist` (a plain `cargo build`).
const NOT_BUILT: &str = "<!doctype html><meta charset=utf-8><title>weft</title>\
<body style=\"font-family:system-ui;max-width:40em;margin:4em auto\"><h1>weft</h1>\
<p>The web UI was not built into this binary. Build it with <code>make run</code> \
(or <code>bash scripts/build_ui.sh</code>, which needs Node.js 20, then rebuild).</p>\
<p>The query API is up: try <a href=\"/api/search\">/api/search</a>.</p>";

fn file(name: &str) -> Option<&'static [u8]> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        Some("map") => "application/json",
        _ => "application/octet-stream",
    }
}

fn respond(name: &str, body: &'static [u8]) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(name)));
    // File names carry no content hash: revalidate on every load.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// `GET /`, `/search`, `/trace/<id>`, `/graph`: the single page.
pub async fn page() -> Response {
    match file("index.html") {
        Some(b) => respond("index.html", b),
        None => respond("index.html", NOT_BUILT.as_bytes()),
    }
}

/// `GET /assets/<file>`.
pub async fn asset(Path(name): Path<String>) -> Response {
    match file(&name).filter(|_| name != "index.html") {
        Some(b) => respond(&name, b),
        None => no_asset(&name),
    }
}

fn no_asset(name: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("no UI asset {name:?}\n")).into_response()
}

/// The UI read from a directory at each request (`--ui-static-files`), for working on the UI
/// without rebuilding the server, as Jaeger's `--query.static-files` does.
#[derive(Clone)]
struct StaticDir(std::sync::Arc<std::path::PathBuf>);

impl StaticDir {
    async fn read(&self, name: &str) -> Option<Vec<u8>> {
        // One path component, no dot files: nothing outside the directory can be named.
        if name.is_empty() || name.starts_with('.') || name.contains(['/', '\\']) {
            return None;
        }
        tokio::fs::read(self.0.join(name)).await.ok()
    }

    fn respond(name: &str, body: Vec<u8>) -> Response {
        let mut r = body.into_response();
        let h = r.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(name)));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }

    async fn page(self) -> Response {
        match self.read("index.html").await {
            Some(b) => Self::respond("index.html", b),
            None => (
                StatusCode::NOT_FOUND,
                format!("no index.html in --ui-static-files {}\n", self.0.display()),
            )
                .into_response(),
        }
    }

    async fn asset(self, name: String) -> Response {
        match self.read(&name).await.filter(|_| name != "index.html") {
            Some(b) => Self::respond(&name, b),
            None => no_asset(&name),
        }
    }
}

/// Fallback of the query port: a browser's page request for a path nothing serves gets the UI
/// with status 404, so the UI shows its own not-found page with a way back; every other
/// request (API clients, `/api/...`, non-GET) gets the API's plain 404.
pub async fn fallback(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let wants_page = method == Method::GET
        && !uri.path().starts_with("/api/")
        && headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
    if !wants_page {
        return crate::ops::not_found(uri).await;
    }
    let mut r = page().await;
    *r.status_mut() = StatusCode::NOT_FOUND;
    r
}

/// The paths of the UI's pages (its router's routes, `ui/src/main.ts`), each answered with
/// the page; any other page a browser asks for gets it with status 404.
const PAGES: &[&str] = &[
    "/",
    "/search",
    "/graph",
    "/sampling",
    "/monitor",
    "/compare",
    "/open",
    "/trace/{id}",
];

/// The UI is served on `--http-port` with the query API.
#[derive(Debug, Clone, clap::Args)]
pub struct UiOptions {
    /// Serve the UI from this directory (a `ui/dist` built by `npm run build`), read at each
    /// request, instead of the copy built into the binary. For working on the UI.
    #[arg(long, env = "WEFT_UI_STATIC_FILES", value_name = "DIR")]
    pub ui_static_files: Option<std::path::PathBuf>,
}

impl crate::apis::Api for UiOptions {
    async fn build(&self, s: &mut crate::app::Server) -> anyhow::Result<()> {
        if !s.runs(crate::modules::Module::QueryApi) {
            return Ok(());
        }
        use axum::routing::get;
        if let Some(dir) = &self.ui_static_files {
            anyhow::ensure!(
                dir.join("index.html").is_file(),
                "--ui-static-files {}: no index.html there (build the UI with `npm run build` in ui/)",
                dir.display()
            );
            let dir = StaticDir(std::sync::Arc::new(dir.clone()));
            let d = dir.clone();
            let mut routes = axum::Router::new().route(
                "/assets/{file}",
                get(move |Path(name): Path<String>| d.clone().asset(name)),
            );
            for path in PAGES {
                let d = dir.clone();
                routes = routes.route(path, get(move || d.clone().page()));
            }
            s.http_routes(routes);
        } else {
            let mut routes = axum::Router::new().route("/assets/{file}", get(asset));
            for path in PAGES {
                routes = routes.route(path, get(page));
            }
            s.http_routes(routes);
        }
        s.http_fallback(axum::Router::new().fallback(fallback));
        Ok(())
    }
}
