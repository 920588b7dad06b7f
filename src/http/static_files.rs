//! The browser client (`static/`), embedded in the binary so it works from
//! any directory. Every file the page loads is listed here with its content
//! type; a test checks that the page refers to no file missing from the list.

use actix_web::{HttpResponse, web};

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const SVG: &str = "image/svg+xml";

/// (path, content type, body) of every file served.
const FILES: &[(&str, &str, &str)] = &[
    ("/", HTML, include_str!("../../static/index.html")),
    ("/index.html", HTML, include_str!("../../static/index.html")),
    ("/app.js", JS, include_str!("../../static/app.js")),
    ("/i18n.js", JS, include_str!("../../static/i18n.js")),
    ("/style.css", CSS, include_str!("../../static/style.css")),
    (
        "/favicon.svg",
        SVG,
        include_str!("../../static/favicon.svg"),
    ),
];

/// Every file, compressed as the browser asks (`Accept-Encoding`: brotli,
/// gzip or zstd), which cuts the page's bytes by about three quarters.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for (path, content_type, body) in FILES {
        cfg.service(
            web::resource(*path)
                .wrap(actix_web::middleware::Compress::default())
                .route(web::get().to(move || async move {
                    HttpResponse::Ok()
                        .content_type(*content_type)
                        .insert_header(("Cache-Control", "no-cache"))
                        .body(*body)
                })),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn every_file_the_page_loads_is_served() {
        let page = include_str!("../../static/index.html");
        let refs = local_refs(page);
        for wanted in ["/app.js", "/i18n.js", "/style.css", "/favicon.svg"] {
            assert!(refs.iter().any(|r| r == wanted), "{wanted} in {refs:?}");
        }
        for r in refs {
            assert!(
                FILES.iter().any(|(path, _, _)| *path == r),
                "{r} is referenced by index.html but not served"
            );
        }
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
