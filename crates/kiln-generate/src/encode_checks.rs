//! Checks and errors of encoder requests (embeddings, text classification): how many
//! inputs a request may carry, and an encoder's input error as the request's 400.

use crate::error::GenerateError;

/// Most inputs one request may carry (OpenAI's limit for embeddings).
pub const MAX_INPUTS: usize = 2048;

/// Checks the number of inputs of a request (`param` names the field).
pub fn check_count(n: usize, param: &str) -> Result<(), GenerateError> {
    if n == 0 {
        return Err(GenerateError::invalid(
            param,
            format!("`{param}` must contain at least one text"),
        ));
    }
    if n > MAX_INPUTS {
        return Err(GenerateError::invalid(
            param,
            format!("`{param}` has {n} texts; at most {MAX_INPUTS} are allowed per request"),
        ));
    }
    Ok(())
}

/// An encoder's error as the request's: an input that can't be read is a 400 on
/// `param` (`truncate_field` is how the endpoint asks for truncation); anything else
/// is the server's fault.
pub fn input_error(
    e: kiln_encoder::Error,
    param: &str,
    single: bool,
    truncate_field: &str,
) -> GenerateError {
    let which = |index: usize| {
        if single {
            format!("`{param}`")
        } else {
            format!("`{param}[{index}]`")
        }
    };
    match e {
        kiln_encoder::Error::InputTooLong { index, tokens, max } => GenerateError::invalid(
            param,
            format!(
                "{} has {tokens} tokens, more than this model's maximum of {max}; \
                 shorten it or set `{truncate_field}` to cut it to its first {max} tokens",
                which(index)
            ),
        ),
        kiln_encoder::Error::Tokenize { index, message } => GenerateError::invalid(
            param,
            format!("cannot tokenize {}: {message}", which(index)),
        ),
        other => GenerateError::Internal(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_api::ClassifiedError;

    #[test]
    fn counts_and_errors_name_the_field() {
        assert!(check_count(1, "input").is_ok());
        assert!(check_count(MAX_INPUTS, "input").is_ok());
        for n in [0, MAX_INPUTS + 1] {
            let e = check_count(n, "input").err().map(|e| e.param());
            assert_eq!(e, Some(Some("input".to_string())));
        }
        let long = || kiln_encoder::Error::InputTooLong {
            index: 3,
            tokens: 300,
            max: 256,
        };
        let e = input_error(long(), "input", false, "truncate");
        assert_eq!(e.param().as_deref(), Some("input"));
        let msg = e.to_string();
        assert!(
            msg.contains("`input[3]` has 300 tokens")
                && msg.contains("maximum of 256")
                && msg.contains("`truncate`"),
            "{msg}"
        );
        let msg = input_error(long(), "text", true, "truncate_inputs").to_string();
        assert!(msg.starts_with("`text` has 300 tokens"), "{msg}");
    }
}
