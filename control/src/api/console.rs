//! The operator console (docs/console.md): a page and its scripts and
//! style, compiled into the binary, served on the admin listener at `/`
//! (also `/console`) and `/console/FILE`. No build step, nothing fetched
//! from anywhere else: the page talks to the public admin API only, and
//! renders every string that comes from a sandbox or a label as text.

use super::segments::Segments;
use super::{ApiError, AppState};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One file of the console.
struct File {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

/// Every file, by the name it is served under.
const FILES: &[File] = &[
    file(
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../console/style.css"),
    ),
    script("main.js", include_str!("../../console/main.js")),
    script("api.js", include_str!("../../console/api.js")),
    script("auth.js", include_str!("../../console/auth.js")),
    script("denials.js", include_str!("../../console/denials.js")),
    script("dom.js", include_str!("../../console/dom.js")),
    script("feed.js", include_str!("../../console/feed.js")),
    script("fleet.js", include_str!("../../console/fleet.js")),
    script("header.js", include_str!("../../console/header.js")),
    script("inbox.js", include_str!("../../console/inbox.js")),
    script("sandbox.js", include_str!("../../console/sandbox.js")),
    script("sandboxes.js", include_str!("../../console/sandboxes.js")),
    script("store.js", include_str!("../../console/store.js")),
    script("toast.js", include_str!("../../console/toast.js")),
];

const INDEX: &str = include_str!("../../console/index.html");

const fn file(name: &'static str, content_type: &'static str, body: &'static str) -> File {
    File {
        name,
        content_type,
        body,
    }
}

const fn script(name: &'static str, body: &'static str) -> File {
    file(name, "text/javascript; charset=utf-8", body)
}

fn off() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "the console is off on this daemon (--console off, CRACKBOX_CONSOLE or [admin] console)",
    )
}

fn served(content_type: &'static str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Files change with the binary: ask again each time (a 304 needs no body).
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `GET /` and `GET /console`: the page.
pub async fn index(State(state): State<AppState>) -> Result<Response, ApiError> {
    if !state.status.console() {
        return Err(off());
    }
    Ok(served("text/html; charset=utf-8", INDEX))
}

/// `GET /console/{file}`: a script or the style sheet.
pub async fn asset(State(state): State<AppState>, Segments(name): Segments<String>) -> Result<Response, ApiError> {
    if !state.status.console() {
        return Err(off());
    }
    let file = FILES
        .iter()
        .find(|file| file.name == name)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "no such console file"))?;
    Ok(served(file.content_type, file.body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_served() {
        let mut imported = vec![];
        for file in FILES.iter().chain([&file("index.html", "", INDEX)]) {
            for line in file.body.lines() {
                let line = line.trim();
                let from = line.split(" from '").nth(1).or_else(|| line.strip_prefix("import '"));
                let src = line.split("src=\"/console/").nth(1);
                let href = line.split("href=\"/console/").nth(1);
                for found in [from, src, href].into_iter().flatten() {
                    let name = found.trim_start_matches("./").trim_start_matches("/console/");
                    imported.push(name.split(['\'', '"']).next().unwrap_or_default().to_owned());
                }
            }
        }
        assert!(imported.len() >= FILES.len(), "{imported:?}");
        for name in imported {
            assert!(FILES.iter().any(|file| file.name == name), "{name} is not served");
        }
    }

    #[test]
    fn no_file_writes_markup_from_data() {
        for file in FILES.iter().filter(|file| file.name.ends_with(".js")) {
            for forbidden in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!file.body.contains(forbidden), "{} uses {forbidden}", file.name);
            }
        }
        assert!(!INDEX.contains("<script>"), "no inline script");
        assert!(!INDEX.contains("style="), "no inline style");
    }
}
