//! The checks that make a digit string a card number, an IBAN or an SSN rather than any
//! number of that length.

/// The Luhn check digit test (card numbers).
pub(crate) fn luhn(digits: &[u8]) -> bool {
    if digits.is_empty() {
        return false;
    }
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, &d)| {
            let d = u32::from(d);
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// A card number's issuer prefix and length: Visa, Mastercard, American Express,
/// Discover, JCB, Diners Club, UnionPay.
pub(crate) fn card_issuer(digits: &[u8]) -> bool {
    let n = digits.len();
    let prefix = |k: usize| {
        digits
            .iter()
            .take(k)
            .fold(0u32, |acc, &d| acc * 10 + u32::from(d))
    };
    match digits.first() {
        Some(4) => matches!(n, 13 | 16 | 19),
        Some(5) => (51..=55).contains(&prefix(2)) && n == 16,
        Some(2) => (2221..=2720).contains(&prefix(4)) && n == 16,
        Some(3) => match prefix(2) {
            34 | 37 => n == 15,
            35 => (3528..=3589).contains(&prefix(4)) && (16..=19).contains(&n),
            30 | 36 | 38 | 39 => (14..=19).contains(&n),
            _ => false,
        },
        Some(6) => {
            (prefix(4) == 6011
                || prefix(2) == 65
                || (644..=649).contains(&prefix(3))
                || prefix(2) == 62)
                && (16..=19).contains(&n)
        }
        _ => false,
    }
}

/// IBAN lengths by country (ISO 13616 registry).
const IBAN_LENGTHS: &[(&str, usize)] = &[
    ("AD", 24),
    ("AE", 23),
    ("AL", 28),
    ("AT", 20),
    ("AZ", 28),
    ("BA", 20),
    ("BE", 16),
    ("BG", 22),
    ("BH", 22),
    ("BR", 29),
    ("BY", 28),
    ("CH", 21),
    ("CR", 22),
    ("CY", 28),
    ("CZ", 24),
    ("DE", 22),
    ("DK", 18),
    ("DO", 28),
    ("EE", 20),
    ("EG", 29),
    ("ES", 24),
    ("FI", 18),
    ("FO", 18),
    ("FR", 27),
    ("GB", 22),
    ("GE", 22),
    ("GI", 23),
    ("GL", 18),
    ("GR", 27),
    ("GT", 28),
    ("HR", 21),
    ("HU", 28),
    ("IE", 22),
    ("IL", 23),
    ("IQ", 23),
    ("IS", 26),
    ("IT", 27),
    ("JO", 30),
    ("KW", 30),
    ("KZ", 20),
    ("LB", 28),
    ("LC", 32),
    ("LI", 21),
    ("LT", 20),
    ("LU", 20),
    ("LV", 21),
    ("MC", 27),
    ("MD", 24),
    ("ME", 22),
    ("MK", 19),
    ("MR", 27),
    ("MT", 31),
    ("MU", 30),
    ("NL", 18),
    ("NO", 15),
    ("PK", 24),
    ("PL", 28),
    ("PS", 29),
    ("PT", 25),
    ("QA", 29),
    ("RO", 24),
    ("RS", 22),
    ("SA", 24),
    ("SC", 31),
    ("SE", 24),
    ("SI", 19),
    ("SK", 24),
    ("SM", 27),
    ("ST", 25),
    ("SV", 28),
    ("TL", 23),
    ("TN", 24),
    ("TR", 26),
    ("UA", 29),
    ("VA", 22),
    ("VG", 24),
    ("XK", 20),
];

/// An IBAN (spaces removed, upper case): its country's length and ISO 7064 mod-97 = 1.
pub(crate) fn iban(s: &str) -> bool {
    let Some(&(_, len)) = IBAN_LENGTHS.iter().find(|(c, _)| s.starts_with(c)) else {
        return false;
    };
    if s.len() != len
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
    {
        return false;
    }
    let rotated = s[4..].bytes().chain(s[..4].bytes());
    let mut rem: u32 = 0;
    for b in rotated {
        let v = if b.is_ascii_digit() {
            u32::from(b - b'0')
        } else {
            u32::from(b - b'A') + 10
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    rem == 1
}

/// A US Social Security number's area, group and serial rules: no area 000, 666 or
/// 900-999, no group 00, no serial 0000.
pub(crate) fn ssn(area: u32, group: u32, serial: u32) -> bool {
    area != 0 && area != 666 && area < 900 && group != 0 && serial != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digits(s: &str) -> Vec<u8> {
        s.bytes()
            .filter(u8::is_ascii_digit)
            .map(|b| b - b'0')
            .collect()
    }

    #[test]
    fn luhn_and_issuers() {
        for good in [
            "4111 1111 1111 1111",
            "5500 0000 0000 0004",
            "3400 0000 0000 009",
            "6011 0000 0000 0004",
            "2221 0000 0000 0009",
        ] {
            let d = digits(good);
            assert!(luhn(&d) && card_issuer(&d), "{good}");
        }
        assert!(!luhn(&digits("4111 1111 1111 1112")));
        assert!(!card_issuer(&digits("9111 1111 1111 1111")));
    }

    #[test]
    fn ibans() {
        assert!(iban("GB82WEST12345698765432"));
        assert!(iban("DE89370400440532013000"));
        assert!(!iban("GB82WEST12345698765433"), "wrong check digits");
        assert!(!iban("GB82WEST1234569876543"), "wrong length");
        assert!(!iban("ZZ82WEST12345698765432"), "unknown country");
    }

    #[test]
    fn ssn_rules() {
        assert!(ssn(123, 45, 6789));
        for (a, g, s) in [
            (0, 45, 6789),
            (666, 45, 6789),
            (912, 45, 6789),
            (123, 0, 6789),
            (123, 45, 0),
        ] {
            assert!(!ssn(a, g, s), "{a}-{g}-{s}");
        }
    }
}
