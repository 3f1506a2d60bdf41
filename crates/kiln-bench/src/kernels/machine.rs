//! What the report says about the machine, from Linux `/proc` (absent elsewhere).

use std::fs;

/// The CPU's `model name` from `/proc/cpuinfo`, or `unknown`.
pub(crate) fn cpu_name() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == "model name")
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The 1, 5 and 15-minute load averages from `/proc/loadavg`.
pub(crate) fn load_average() -> Option<[f64; 3]> {
    parse_loadavg(&fs::read_to_string("/proc/loadavg").ok()?)
}

fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut it = text.split_whitespace().map(str::parse::<f64>);
    Some([it.next()?.ok()?, it.next()?.ok()?, it.next()?.ok()?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_loadavg() {
        assert_eq!(
            parse_loadavg("3.91 4.58 4.26 3/512 12345\n"),
            Some([3.91, 4.58, 4.26])
        );
        assert_eq!(parse_loadavg("3.91 x"), None);
    }
}
