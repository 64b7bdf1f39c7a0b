//! How Hearth's programs log: to standard error, as text (colours only at a terminal) or as one
//! JSON object a line, filtered by `HEARTH_LOG` (`info` by default). Either way an event carries
//! the fields of the spans it happened in (an edge's name, a node's id, a pull's source, an admin
//! request's route): in text as `span{field=value}:` before the message, in JSON as `span` (the
//! innermost) and `spans` (all of them, outermost first). The spans that carry who and where
//! are at warn level, so that under `HEARTH_LOG=warn` a warning still names them.

/// The log format `HEARTH_LOG_FORMAT` names: `text` (or unset) or `json`.
pub fn json_from(format: Option<&str>) -> Result<bool, String> {
    match format {
        None | Some("text") => Ok(false),
        Some("json") => Ok(true),
        Some(other) => Err(format!("HEARTH_LOG_FORMAT must be text or json, not {other:?}")),
    }
}

/// What logs go through: text, or one JSON object a line (`json`), filtered by `filter`, to
/// `writer`.
pub fn logs<W>(json: bool, filter: tracing_subscriber::EnvFilter, ansi: bool, writer: W) -> tracing::Dispatch
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(ansi);
    if json {
        tracing::Dispatch::new(builder.json().with_current_span(true).with_span_list(true).finish())
    } else {
        tracing::Dispatch::new(builder.finish())
    }
}

/// Sets the program's logs up: to standard error, `HEARTH_LOG` filtering them (`info` by
/// default), colours only for a person at a terminal (a log file or a journal gets plain text).
pub fn init(json: bool) -> Result<(), tracing::dispatcher::SetGlobalDefaultError> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("HEARTH_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing::dispatcher::set_global_default(logs(json, filter, ansi, std::io::stderr))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_text_or_json() {
        assert_eq!(json_from(None), Ok(false));
        assert_eq!(json_from(Some("text")), Ok(false));
        assert_eq!(json_from(Some("json")), Ok(true));
        assert!(json_from(Some("yaml")).unwrap_err().contains("text or json"));
    }

    /// In JSON, an event carries the spans it happened in, the innermost as `span`.
    #[test]
    fn json_lines_carry_their_spans() {
        let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u8>::new()));
        let sink = written.clone();
        let writer = move || Sink(sink.clone());
        let dispatch = logs(true, tracing_subscriber::EnvFilter::new("info"), false, writer);
        tracing::dispatcher::with_default(&dispatch, || {
            let _pull = tracing::warn_span!("pull", from = "edge").entered();
            tracing::info!(version = 7, "accepted");
        });
        let text = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        let line: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(line["span"]["name"], "pull");
        assert_eq!(line["span"]["from"], "edge");
        assert_eq!(line["fields"]["version"], 7);
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
