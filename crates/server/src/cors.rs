//! Cross-origin requests: browsers send a preflight `OPTIONS` before a JSON POST
//! with an `Authorization` header; the layer answers it (before the API-key check,
//! which a preflight never passes) and adds the CORS headers to real responses.

use std::time::Duration;

use axum::http::{HeaderValue, Method};
use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer};

/// The layer for `origins` (`*` = any origin); None when the list is empty.
/// Origins that are not valid header values were rejected by `check_origins`.
pub fn layer(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            // `*` would not cover `Authorization`; echo what the browser asks for.
            .allow_headers(AllowHeaders::mirror_request())
            .max_age(Duration::from_secs(600)),
    )
}

/// Checks `--allowed-origins` values: `*` or `scheme://host[:port]`.
pub fn check_origins(origins: &[String]) -> anyhow::Result<()> {
    for o in origins {
        let valid = o == "*"
            || ((o.starts_with("http://") || o.starts_with("https://"))
                && !o.ends_with('/')
                && HeaderValue::from_str(o).is_ok());
        if !valid {
            anyhow::bail!("allowed origin {o:?} must be `*` or scheme://host[:port] (no path, no trailing slash)");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_checked() {
        assert!(check_origins(&["*".into(), "http://localhost:3000".into()]).is_ok());
        assert!(check_origins(&["localhost".into()]).is_err());
        assert!(check_origins(&["https://a.example/".into()]).is_err());
        assert!(layer(&[]).is_none());
    }
}
