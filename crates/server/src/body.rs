//! Reading a JSON request body with OpenAI-shaped errors for every way it can be
//! wrong: too large, not UTF-8, not JSON, not an object, unknown keys, wrong types.

use axum::body::Body;
use axum::http::{header, HeaderMap};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::ApiError;

/// A body with a Content-Type must be JSON (415 otherwise); one without any is read
/// as JSON, for hand-written clients.
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or("(not text)");
    let mime = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json")) {
        Ok(())
    } else {
        Err(ApiError::unsupported_media_type(text))
    }
}

/// Reads at most `limit` bytes of `body` (413 beyond that).
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<Vec<u8>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::body_too_large(limit));
    }
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok(bytes.to_vec()),
        Err(e) if is_length_limit(&e) => Err(ApiError::body_too_large(limit)),
        Err(e) => Err(ApiError::invalid(format!(
            "Could not read the request body: {e}"
        ))),
    }
}

fn is_length_limit(err: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// Parses `bytes` as a JSON object whose keys are all in `fields`, into `T`.
pub fn parse_json_object<T: DeserializeOwned>(
    bytes: &[u8],
    fields: &[&str],
) -> Result<T, ApiError> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        ApiError::invalid(format!(
            "The request body is not valid UTF-8 (invalid byte at offset {}).",
            e.valid_up_to()
        ))
    })?;
    if text.trim().is_empty() {
        return Err(ApiError::invalid(
            "The request body is empty; expected a JSON object.",
        ));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| {
        ApiError::invalid(format!(
            "We could not parse the JSON body of your request ({e}). Send valid JSON."
        ))
    })?;
    let Value::Object(map) = &value else {
        return Err(ApiError::invalid(format!(
            "The request body must be a JSON object, not {}.",
            json_kind(&value)
        )));
    };
    if let Some(unknown) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(ApiError::invalid_param(
            unknown.clone(),
            format!("Unrecognized request argument supplied: {unknown}"),
        ));
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            ApiError::invalid(format!("Invalid request body: {inner}"))
        } else {
            ApiError::invalid_param(path.clone(), format!("Invalid value for `{path}`: {inner}"))
        }
    })
}

/// "a string", "an array", ... for error messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ChatCompletionRequest;

    fn parse(body: &[u8]) -> Result<ChatCompletionRequest, ApiError> {
        parse_json_object(body, ChatCompletionRequest::FIELDS)
    }

    #[test]
    fn accepts_a_minimal_chat_request() {
        let r = parse(br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#).unwrap();
        assert_eq!(r.messages.len(), 1);
    }

    #[test]
    fn rejects_each_malformed_body_with_a_precise_message() {
        let cases: &[(&[u8], &str, Option<&str>)] = &[
            (b"\xff\xfe{}", "not valid UTF-8", None),
            (b"", "empty", None),
            (b"{\"messages\": [", "could not parse the JSON", None),
            (b"[1,2]", "must be a JSON object, not an array", None),
            (
                br#"{"messages":[],"foo":1}"#,
                "Unrecognized request argument supplied: foo",
                Some("foo"),
            ),
            (
                br#"{"messages":[],"temperature":"hot"}"#,
                "Invalid value for `temperature`",
                Some("temperature"),
            ),
            (
                br#"{"messages":"hi"}"#,
                "Invalid value for `messages`",
                Some("messages"),
            ),
            (
                br#"{"messages":[{"role":"user","content":"x","bogus":1}]}"#,
                "unknown field `bogus`",
                Some("messages[0].bogus"),
            ),
            (
                br#"{"messages":[{"content":"x"}]}"#,
                "missing field `role`",
                Some("messages[0]"),
            ),
            (br#"{"model":"m"}"#, "missing field `messages`", None),
        ];
        for (body, needle, param) in cases {
            let e = parse(body).unwrap_err();
            assert_eq!(e.status, 400, "{body:?}");
            assert!(
                e.message.contains(needle),
                "{:?}: {}",
                String::from_utf8_lossy(body),
                e.message
            );
            assert_eq!(
                e.param.as_deref(),
                *param,
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn only_json_content_types_are_read() {
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
            require_json(&h)
        };
        assert!(require_json(&HeaderMap::new()).is_ok());
        assert!(with("application/json").is_ok());
        assert!(with("Application/JSON; charset=utf-8").is_ok());
        assert!(with("application/vnd.api+json").is_ok());
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
        ] {
            let e = with(bad).unwrap_err();
            assert_eq!(e.status, 415, "{bad}");
            assert!(e.message.contains(bad), "{}", e.message);
        }
    }

    #[tokio::test]
    async fn oversized_bodies_get_413() {
        let body = Body::from(vec![b' '; 100]);
        let e = read_limited(&HeaderMap::new(), body, 10).await.unwrap_err();
        assert_eq!(e.status, 413);
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_LENGTH, "100".parse().unwrap());
        let e = read_limited(&headers, Body::empty(), 10).await.unwrap_err();
        assert_eq!(e.status, 413);
        let ok = read_limited(&HeaderMap::new(), Body::from("abc"), 10)
            .await
            .unwrap();
        assert_eq!(ok, b"abc");
    }
}
