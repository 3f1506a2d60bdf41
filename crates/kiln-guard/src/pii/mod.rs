//! PII recognisers: a pattern finds candidates, a validator keeps the real ones (a
//! card number passes Luhn and has an issuer's prefix, an IBAN its country's length and
//! mod-97, an SSN the area and group rules, an IP address parses), so "order 4111 ..."
//! is not a card unless it is one. Only categories leave here, never the text found.

mod checksums;

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::ops::Range;
use std::sync::LazyLock;

use regex::Regex;

/// A kind of personal or secret data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PiiCategory {
    EmailAddress,
    PhoneNumber,
    CreditCard,
    IbanCode,
    UsSsn,
    IpAddress,
    /// API keys, access tokens and private keys of common shapes.
    ApiKey,
}

impl PiiCategory {
    pub const ALL: [PiiCategory; 7] = [
        Self::EmailAddress,
        Self::PhoneNumber,
        Self::CreditCard,
        Self::IbanCode,
        Self::UsSsn,
        Self::IpAddress,
        Self::ApiKey,
    ];

    /// The name in headers, scores and configuration (Presidio's names).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EmailAddress => "EMAIL_ADDRESS",
            Self::PhoneNumber => "PHONE_NUMBER",
            Self::CreditCard => "CREDIT_CARD",
            Self::IbanCode => "IBAN_CODE",
            Self::UsSsn => "US_SSN",
            Self::IpAddress => "IP_ADDRESS",
            Self::ApiKey => "API_KEY",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
    }
}

/// Builds a pattern that is part of the program (a bad one is a bug caught by tests).
fn re(pattern: &str) -> Regex {
    Regex::new(pattern).unwrap_or_else(|e| panic!("PII pattern {pattern}: {e}"))
}

static EMAIL: LazyLock<Regex> = LazyLock::new(|| {
    re(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b")
});
/// `+` and 8-15 digits (E.164) or a North American number, with usual separators.
static PHONE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{2,4}\)|\d{2,4})[ .-]?\d{3,4}[ .-]?\d{3,4}\b")
});
static CARD: LazyLock<Regex> = LazyLock::new(|| re(r"\b\d(?:[ -]?\d){12,18}\b"));
static IBAN: LazyLock<Regex> = LazyLock::new(|| re(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{1,4}){3,8}\b"));
static SSN: LazyLock<Regex> = LazyLock::new(|| re(r"\b(\d{3})([- .])(\d{2})([- .])(\d{4})\b"));
static IPV4: LazyLock<Regex> = LazyLock::new(|| re(r"\b\d{1,3}(?:\.\d{1,3}){3}\b"));
static IPV6: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}(?:%\w+)?"));
static SECRETS: LazyLock<Regex> = LazyLock::new(|| {
    re(concat!(
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",             // AWS access key id
        r"|\bgh[pousr]_[A-Za-z0-9]{36,255}\b",        // GitHub token
        r"|\bgithub_pat_[A-Za-z0-9_]{60,255}\b",      // GitHub fine-grained token
        r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b", // OpenAI, Anthropic
        r"|\bxox[abposr]-[A-Za-z0-9-]{10,}\b",        // Slack
        r"|\bAIza[0-9A-Za-z_-]{35}\b",                // Google API key
        r"|\b[rs]k_live_[0-9a-zA-Z]{16,}\b",          // Stripe
        r"|\bglpat-[0-9A-Za-z_-]{20}\b",              // GitLab
        r"|-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
        r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", // JWT
    ))
});

/// The categories found in `text`.
pub fn detect(text: &str) -> BTreeSet<PiiCategory> {
    let mut found = BTreeSet::new();
    // Where numbers of other kinds are, so no phone number is read inside them.
    let mut taken: Vec<Range<usize>> = Vec::new();
    if EMAIL.is_match(text) {
        found.insert(PiiCategory::EmailAddress);
    }
    if SECRETS.is_match(text) {
        found.insert(PiiCategory::ApiKey);
    }
    for m in CARD.find_iter(text) {
        let d = digits(m.as_str());
        if checksums::luhn(&d) && checksums::card_issuer(&d) {
            found.insert(PiiCategory::CreditCard);
            taken.push(m.range());
        }
    }
    for m in IBAN.find_iter(text) {
        if checksums::iban(&m.as_str().replace(' ', "")) {
            found.insert(PiiCategory::IbanCode);
            taken.push(m.range());
        }
    }
    for c in SSN.captures_iter(text) {
        let n = |i: usize| {
            c.get(i)
                .and_then(|m| m.as_str().parse::<u32>().ok())
                .unwrap_or(0)
        };
        // Both separators the same: "123-45-6789", not "123-45 6789".
        let same = c.get(2).map(|m| m.as_str()) == c.get(4).map(|m| m.as_str());
        if same && checksums::ssn(n(1), n(3), n(5)) {
            found.insert(PiiCategory::UsSsn);
            taken.extend(c.get(0).map(|m| m.range()));
        }
    }
    for m in IPV4.find_iter(text) {
        if m.as_str().parse::<Ipv4Addr>().is_ok() {
            found.insert(PiiCategory::IpAddress);
            taken.push(m.range());
        }
    }
    let ip6 = IPV6.find_iter(text).any(|m| {
        let s = m.as_str().split('%').next().unwrap_or_default();
        (s.contains("::") || s.matches(':').count() == 7) && s.parse::<Ipv6Addr>().is_ok()
    });
    if ip6 {
        found.insert(PiiCategory::IpAddress);
    }
    let phone = PHONE
        .find_iter(text)
        .filter(|m| !taken.iter().any(|t| t.start < m.end() && m.start() < t.end))
        .any(|m| phone_number(m.as_str()));
    if phone {
        found.insert(PiiCategory::PhoneNumber);
    }
    found
}

/// A phone number: with a `+`, 8 to 15 digits; otherwise a North American number (10
/// digits, or 11 starting with 1) whose area code and exchange don't start with 0 or 1.
fn phone_number(s: &str) -> bool {
    let d = digits(s);
    if s.starts_with('+') {
        return (8..=15).contains(&d.len());
    }
    match d.len() {
        10 => d[0] >= 2 && d[3] >= 2,
        11 => d[0] == 1 && d[1] >= 2 && d[4] >= 2,
        _ => false,
    }
}

fn digits(s: &str) -> Vec<u8> {
    s.bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cats(text: &str) -> Vec<&'static str> {
        detect(text).into_iter().map(PiiCategory::as_str).collect()
    }

    #[test]
    fn each_recogniser_finds_its_kind() {
        assert_eq!(
            cats("write to ann.lee+work@example.co.uk today"),
            ["EMAIL_ADDRESS"]
        );
        assert_eq!(cats("call (415) 555-2671 after 5"), ["PHONE_NUMBER"]);
        assert_eq!(cats("call +44 20 7946 0958"), ["PHONE_NUMBER"]);
        assert_eq!(cats("card 4111 1111 1111 1111 exp 12/29"), ["CREDIT_CARD"]);
        assert_eq!(cats("card 3782-822463-10005"), ["CREDIT_CARD"]);
        assert_eq!(
            cats("IBAN GB82 WEST 1234 5698 7654 32 please"),
            ["IBAN_CODE"]
        );
        assert_eq!(cats("my ssn is 123-45-6789"), ["US_SSN"]);
        assert_eq!(cats("server 192.168.10.4 is down"), ["IP_ADDRESS"]);
        assert_eq!(cats("ping 2001:db8::8a2e:370:7334 now"), ["IP_ADDRESS"]);
        assert_eq!(cats("key AKIAIOSFODNN7EXAMPLE leaked"), ["API_KEY"]);
        assert_eq!(
            cats("token ghp_abcdefghijklmnopqrstuvwxyz0123456789"),
            ["API_KEY"]
        );
        assert_eq!(cats("-----BEGIN RSA PRIVATE KEY-----\nMIIE"), ["API_KEY"]);
    }

    #[test]
    fn lookalikes_with_bad_checksums_are_not_pii() {
        assert!(
            cats("order 4111 1111 1111 1112 shipped").is_empty(),
            "fails Luhn"
        );
        assert!(
            cats("tracking 1234 5678 9012 3456").is_empty(),
            "no issuer, fails Luhn"
        );
        assert!(
            cats("IBAN GB82 WEST 1234 5698 7654 33").is_empty(),
            "fails mod-97"
        );
        assert!(
            cats("ref 000-12-3456 and 666-12-3456 and 912-12-3456").is_empty(),
            "SSN areas"
        );
        assert!(cats("ref 123-00-4567").is_empty(), "SSN group 00");
        assert!(
            cats("version 1.2.3.4000 and 300.1.1.1").is_empty(),
            "not IPv4"
        );
        assert!(
            cats("at 10:30:45 the 2 + 2 = 4").is_empty(),
            "a time is not IPv6"
        );
        assert!(cats("call 123-456-7890").is_empty(), "area code 123");
        assert!(cats("user@localhost is not an address").is_empty());
        assert!(cats("What's the weather like today?").is_empty());
    }

    #[test]
    fn categories_parse_by_name() {
        for c in PiiCategory::ALL {
            assert_eq!(PiiCategory::parse(c.as_str()), Some(c));
        }
        assert_eq!(
            PiiCategory::parse("credit_card"),
            Some(PiiCategory::CreditCard)
        );
        assert_eq!(PiiCategory::parse("NAME"), None);
    }
}
