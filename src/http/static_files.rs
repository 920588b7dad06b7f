//! The browser client (`static/`), embedded in the binary so it works from
//! any directory: the game's page (`/`, its script `/app.js` and the
//! view modules that imports, under `/app/`) and the operator console
//! (`/admin`), and the JavaScript client the game's page imports
//! (`clients/js/src`, at `/client/`). Every file a page loads is listed here
//! with its content type; a test checks that no page, and no script it
//! imports, refers to a file missing from the list.

use std::sync::LazyLock;

use actix_web::{HttpRequest, HttpResponse, web};

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// Whether `path` is one of the page's files (not in the API document).
pub(super) fn is_page(path: &str) -> bool {
    FILES.iter().any(|(p, _, _)| *p == path)
}

/// (path, content type, body) of every file served.
const FILES: &[(&str, &str, &str)] = &[
    ("/", HTML, include_str!("../../static/index.html")),
    ("/index.html", HTML, include_str!("../../static/index.html")),
    ("/app.js", JS, include_str!("../../static/app.js")),
    // The page's views, the modules app.js imports.
    ("/app/dom.js", JS, include_str!("../../static/app/dom.js")),
    (
        "/app/language.js",
        JS,
        include_str!("../../static/app/language.js"),
    ),
    (
        "/app/state.js",
        JS,
        include_str!("../../static/app/state.js"),
    ),
    (
        "/app/lobby.js",
        JS,
        include_str!("../../static/app/lobby.js"),
    ),
    (
        "/app/story.js",
        JS,
        include_str!("../../static/app/story.js"),
    ),
    (
        "/app/cards.js",
        JS,
        include_str!("../../static/app/cards.js"),
    ),
    (
        "/app/composer.js",
        JS,
        include_str!("../../static/app/composer.js"),
    ),
    ("/app/hero.js", JS, include_str!("../../static/app/hero.js")),
    ("/app/map.js", JS, include_str!("../../static/app/map.js")),
    (
        "/app/party.js",
        JS,
        include_str!("../../static/app/party.js"),
    ),
    (
        "/app/connection.js",
        JS,
        include_str!("../../static/app/connection.js"),
    ),
    (
        "/app/approvals.js",
        JS,
        include_str!("../../static/app/approvals.js"),
    ),
    // @questd/client, the page's link to the server (app/state.js imports it).
    (
        "/client/index.js",
        JS,
        include_str!("../../clients/js/src/index.js"),
    ),
    (
        "/client/client.js",
        JS,
        include_str!("../../clients/js/src/client.js"),
    ),
    (
        "/client/connection.js",
        JS,
        include_str!("../../clients/js/src/connection.js"),
    ),
    (
        "/client/chats.js",
        JS,
        include_str!("../../clients/js/src/chats.js"),
    ),
    (
        "/client/party.js",
        JS,
        include_str!("../../clients/js/src/party.js"),
    ),
    (
        "/client/approvals.js",
        JS,
        include_str!("../../clients/js/src/approvals.js"),
    ),
    (
        "/client/errors.js",
        JS,
        include_str!("../../clients/js/src/errors.js"),
    ),
    (
        "/client/util.js",
        JS,
        include_str!("../../clients/js/src/util.js"),
    ),
    ("/i18n.js", JS, include_str!("../../static/i18n.js")),
    ("/style.css", CSS, include_str!("../../static/style.css")),
    (
        "/favicon.svg",
        SVG,
        include_str!("../../static/favicon.svg"),
    ),
    ("/admin", HTML, include_str!("../../static/admin.html")),
    ("/admin.js", JS, include_str!("../../static/admin.js")),
    ("/admin.css", CSS, include_str!("../../static/admin.css")),
];

/// A file's bodies: as it is, and compressed once (the files are fixed).
struct Bodies {
    plain: &'static str,
    brotli: bytes::Bytes,
    gzip: bytes::Bytes,
}

impl Bodies {
    fn of(plain: &'static str) -> Self {
        use std::io::Write;
        let mut brotli = Vec::new();
        {
            let mut w = brotli::CompressorWriter::new(&mut brotli, 4096, 11, 22);
            // Writing to a Vec cannot fail (nor can the gzip below).
            let _ = w.write_all(plain.as_bytes());
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let _ = gz.write_all(plain.as_bytes());
        Self {
            plain,
            brotli: brotli.into(),
            gzip: gz.finish().unwrap_or_default().into(),
        }
    }
}

/// The bodies of [`FILES`], in its order, made at the first request.
static BODIES: LazyLock<Vec<Bodies>> =
    LazyLock::new(|| FILES.iter().map(|(_, _, body)| Bodies::of(body)).collect());

/// Which encoding `Accept-Encoding` allows, best first: `br`, `gzip`, or
/// none. A coding with `q=0` is refused.
fn accepted(header: Option<&str>) -> Option<&'static str> {
    let header = header?;
    let allows = |name: &str| {
        header.split(',').any(|part| {
            let mut fields = part.split(';').map(str::trim);
            let coding = fields.next().unwrap_or_default();
            let refused = fields.any(|f| {
                f.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case(name) || coding == "*") && !refused
        })
    };
    ["br", "gzip"].into_iter().find(|c| allows(c))
}

/// Every file, compressed with brotli or gzip when `Accept-Encoding` allows
/// it (about three quarters fewer bytes). The compressed bodies are made
/// once, at the first request, not per request.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for (i, (path, content_type, _)) in FILES.iter().enumerate() {
        cfg.route(
            path,
            super::routes::on(actix_web::http::Method::GET, path).to(
                move |req: HttpRequest| async move {
                    let bodies = &BODIES[i];
                    let mut resp = HttpResponse::Ok();
                    resp.content_type(*content_type)
                        .insert_header(("Cache-Control", "no-cache"))
                        .insert_header(("Vary", "Accept-Encoding"));
                    let asked = req
                        .headers()
                        .get("Accept-Encoding")
                        .and_then(|v| v.to_str().ok());
                    match accepted(asked) {
                        Some("br") => resp
                            .insert_header(("Content-Encoding", "br"))
                            .body(bodies.brotli.clone()),
                        Some(_) => resp
                            .insert_header(("Content-Encoding", "gzip"))
                            .body(bodies.gzip.clone()),
                        None => resp.body(bodies.plain),
                    }
                },
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoding_follows_accept_encoding() {
        let cases = [
            (None, None),
            (Some(""), None),
            (Some("identity"), None),
            (Some("gzip"), Some("gzip")),
            (Some("gzip, deflate, br"), Some("br")),
            (Some("br;q=0, gzip"), Some("gzip")),
            (Some("br;q=0, gzip;q=0"), None),
            (Some("*"), Some("br")),
            (Some("GZIP"), Some("gzip")),
        ];
        for (header, want) in cases {
            assert_eq!(accepted(header), want, "{header:?}");
        }
    }

    #[test]
    fn compressed_bodies_read_back_as_the_file() {
        use std::io::Read;
        let app = include_str!("../../static/app.js");
        let bodies = Bodies::of(app);
        let mut text = String::new();
        brotli::Decompressor::new(&bodies.brotli[..], 4096)
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, app);
        text.clear();
        flate2::read::GzDecoder::new(&bodies.gzip[..])
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, app);
        assert!(bodies.brotli.len() * 2 < app.len(), "it is smaller");
    }

    /// Paths in `src="/…"` and `href="/…"` attributes of the page.
    fn local_refs(html: &str) -> Vec<String> {
        let mut refs = Vec::new();
        for attr in ["src=\"/", "href=\"/"] {
            for (i, _) in html.match_indices(attr) {
                let rest = &html[i + attr.len() - 1..];
                if let Some(end) = rest.find('"') {
                    refs.push(rest[..end].to_owned());
                }
            }
        }
        refs
    }

    #[test]
    fn every_file_the_pages_load_is_served() {
        let pages = [
            (
                "index.html",
                include_str!("../../static/index.html"),
                &["/app.js", "/i18n.js", "/style.css", "/favicon.svg"][..],
            ),
            (
                "admin.html",
                include_str!("../../static/admin.html"),
                &["/admin.js", "/admin.css", "/style.css", "/favicon.svg"][..],
            ),
        ];
        for (name, page, wanted) in pages {
            let refs = local_refs(page);
            for wanted in wanted {
                assert!(
                    refs.iter().any(|r| r == wanted),
                    "{wanted} in {name}'s {refs:?}"
                );
            }
            for r in refs {
                assert!(
                    FILES.iter().any(|(path, _, _)| *path == r),
                    "{r} is referenced by {name} but not served"
                );
            }
        }
    }

    /// Paths a served module imports (`from '…'`), resolved against its own path.
    fn imports(path: &str, js: &str) -> Vec<String> {
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        let mut found = Vec::new();
        for quote in ["'", "\""] {
            let pattern = format!("from {quote}");
            for (i, _) in js.match_indices(&pattern) {
                let rest = &js[i + pattern.len()..];
                let Some(end) = rest.find(quote) else {
                    continue;
                };
                let target = &rest[..end];
                if let Some(relative) = target.strip_prefix("./") {
                    found.push(format!("{dir}{relative}"));
                } else {
                    found.push(target.to_owned());
                }
            }
        }
        found
    }

    #[test]
    fn every_module_a_script_imports_is_served() {
        let app: Vec<String> = FILES
            .iter()
            .filter(|(p, _, _)| *p == "/app.js" || p.starts_with("/app/"))
            .flat_map(|(path, _, body)| imports(path, body))
            .collect();
        assert!(app.iter().any(|p| p == "/client/index.js"), "{app:?}");
        let mut checked = 0;
        for (path, _, body) in FILES.iter().filter(|(p, _, _)| p.ends_with(".js")) {
            for target in imports(path, body) {
                checked += 1;
                assert!(
                    FILES.iter().any(|(p, _, _)| *p == target),
                    "{target} is imported by {path} but not served"
                );
            }
        }
        assert!(checked >= 6, "the client's modules import each other");
    }

    /// The modules `/app.js` imports, directly or through others.
    fn page_modules() -> Vec<String> {
        let mut todo = vec!["/app.js".to_owned()];
        let mut seen: Vec<String> = Vec::new();
        while let Some(path) = todo.pop() {
            let Some((_, _, body)) = FILES.iter().find(|(p, _, _)| *p == path) else {
                continue; // every_module_a_script_imports_is_served says so
            };
            for target in imports(&path, body) {
                if !seen.contains(&target) {
                    seen.push(target.clone());
                    todo.push(target);
                }
            }
        }
        seen
    }

    #[test]
    fn the_page_preloads_exactly_the_modules_it_imports() {
        let page = include_str!("../../static/index.html");
        let tag = "<link rel=\"modulepreload\" href=\"";
        let mut preloaded: Vec<&str> = page
            .match_indices(tag)
            .filter_map(|(i, _)| {
                let rest = &page[i + tag.len()..];
                rest.find('"').map(|end| &rest[..end])
            })
            .collect();
        let mut imported = page_modules();
        assert!(imported.len() >= 10, "{imported:?}");
        preloaded.sort_unstable();
        imported.sort_unstable();
        // Without a preload, a module is only asked for once the one that
        // imports it has arrived: one round trip per level of imports.
        assert_eq!(preloaded, imported);
    }

    #[test]
    fn content_types_follow_the_extension() {
        for (path, content_type, body) in FILES {
            let want = match path.rsplit('.').next() {
                Some("js") => JS,
                Some("css") => CSS,
                Some("svg") => SVG,
                _ => HTML,
            };
            assert_eq!(*content_type, want, "{path}");
            assert!(!body.is_empty(), "{path} is empty");
        }
    }
}
