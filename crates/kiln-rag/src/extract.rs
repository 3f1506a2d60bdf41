//! A stored file's bytes to the text that is chunked: UTF-8 text and Markdown as they
//! are, HTML stripped to its text. Anything else is refused with a reason a client can
//! act on (the file's `last_error`).

use kiln_api::vector_stores::LastError;

/// Width html2text wraps at: wide enough that it never wraps a real paragraph, since
/// the chunker, not the line width, decides where text is cut.
const HTML_WIDTH: usize = 100_000;

/// Formats refused by name, so the error says what the file is.
const BINARY_EXTENSIONS: &[&str] = &[
    "pdf", "doc", "docx", "pptx", "xlsx", "xls", "png", "jpg", "jpeg", "gif", "zip", "gz", "tar",
    "exe", "bin",
];

/// The text of `filename`'s contents `bytes`, or why it can't be read.
pub fn text_of(filename: &str, bytes: &[u8]) -> Result<String, LastError> {
    let ext = filename
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    if BINARY_EXTENSIONS.contains(&ext.as_str()) {
        return Err(unsupported(format!(
            "'{filename}' is a .{ext} file; vector stores here read UTF-8 text, Markdown and HTML"
        )));
    }
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| {
        unsupported(format!(
            "'{filename}' is not UTF-8 text (invalid byte at offset {}); vector stores here read \
             UTF-8 text, Markdown and HTML",
            e.valid_up_to()
        ))
    })?;
    if text.contains('\0') {
        return Err(unsupported(format!(
            "'{filename}' holds NUL bytes, so it is not text"
        )));
    }
    let text = if is_html(&ext, text) {
        html2text::config::plain_no_decorate()
            .string_from_read(text.as_bytes(), HTML_WIDTH)
            .map_err(|e| LastError {
                code: "invalid_file".into(),
                message: format!("'{filename}' could not be read as HTML: {e}"),
            })?
    } else {
        text.to_string()
    };
    if text.trim().is_empty() {
        return Err(LastError {
            code: "invalid_file".into(),
            message: format!("'{filename}' has no text to index"),
        });
    }
    Ok(text)
}

/// HTML by its extension, or by a document that opens as HTML.
fn is_html(ext: &str, text: &str) -> bool {
    if matches!(ext, "html" | "htm" | "xhtml") {
        return true;
    }
    let head: String = text
        .trim_start()
        .chars()
        .take(15)
        .collect::<String>()
        .to_ascii_lowercase();
    head.starts_with("<!doctype html") || head.starts_with("<html")
}

fn unsupported(message: String) -> LastError {
    LastError {
        code: "unsupported_file".into(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_markdown_and_html() {
        assert_eq!(
            text_of("a.txt", b"hello\nworld").ok().as_deref(),
            Some("hello\nworld")
        );
        assert_eq!(
            text_of("a.md", b"\xef\xbb\xbf# Title\n\nBody")
                .ok()
                .as_deref(),
            Some("# Title\n\nBody")
        );
        let html = b"<html><head><title>T</title><script>var x = 1;</script></head>\
            <body><h1>Kilns</h1><p>Fire <b>clay</b> at 1200&deg;C.</p></body></html>";
        let text = text_of("page.html", html).expect("html");
        assert!(
            text.contains("Kilns") && text.contains("Fire clay at 1200°C."),
            "{text}"
        );
        assert!(!text.contains('<') && !text.contains("var x"), "{text}");
        // Sniffed without an extension.
        let text = text_of("page", b"<!DOCTYPE html><p>Hi &amp; bye</p>").expect("html");
        assert!(text.contains("Hi & bye"), "{text}");
    }

    #[test]
    fn refusals_say_why() {
        let e = text_of("report.pdf", b"%PDF-1.7").expect_err("pdf");
        assert_eq!(e.code, "unsupported_file");
        assert!(e.message.contains(".pdf"), "{}", e.message);
        let e = text_of("x.txt", b"ok \xff\xfe").expect_err("latin-1");
        assert!(
            e.code == "unsupported_file" && e.message.contains("offset 3"),
            "{e:?}"
        );
        assert_eq!(
            text_of("x.txt", b"a\0b").err().map(|e| e.code).as_deref(),
            Some("unsupported_file")
        );
        assert_eq!(
            text_of("x.txt", b"  \n ").err().map(|e| e.code).as_deref(),
            Some("invalid_file")
        );
        assert_eq!(
            text_of("x.html", b"<p> </p>")
                .err()
                .map(|e| e.code)
                .as_deref(),
            Some("invalid_file")
        );
    }
}
