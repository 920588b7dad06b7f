//! The browser client, embedded in the binary so it works from any directory.

use actix_web::{HttpResponse, web};

const FILES: &[(&str, &str, &str)] = &[
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../../static/index.html"),
    ),
    (
        "/index.html",
        "text/html; charset=utf-8",
        include_str!("../../static/index.html"),
    ),
    (
        "/app.js",
        "text/javascript; charset=utf-8",
        include_str!("../../static/app.js"),
    ),
    (
        "/style.css",
        "text/css; charset=utf-8",
        include_str!("../../static/style.css"),
    ),
];

pub fn configure(cfg: &mut web::ServiceConfig) {
    for (path, content_type, body) in FILES {
        cfg.route(
            path,
            web::get().to(move || async move {
                HttpResponse::Ok()
                    .content_type(*content_type)
                    .insert_header(("Cache-Control", "no-cache"))
                    .body(*body)
            }),
        );
    }
}
