//! The connection settings as a command line or a config file's `[http]` table gives
//! them, each optional, merged and checked into [`ConnectionLimits`] and a
//! [`CorsPolicy`].

use std::time::Duration;

use serde::Deserialize;

use crate::cors::{BadOrigin, CorsPolicy};
use crate::listen::{ConnectionLimits, LimitError};

/// Every field optional: flags over the file over the defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSettings {
    /// Seconds (see [`ConnectionLimits::header_timeout`]).
    pub header_timeout: Option<f64>,
    /// Seconds (see [`ConnectionLimits::body_timeout`]).
    pub body_timeout: Option<f64>,
    pub max_connections: Option<usize>,
    /// Origins allowed by CORS; `*` for any.
    pub cors_origins: Option<Vec<String>>,
}

impl HttpSettings {
    /// `self`'s settings, and `file`'s where `self` has none.
    pub fn or(self, file: HttpSettings) -> Self {
        Self {
            header_timeout: self.header_timeout.or(file.header_timeout),
            body_timeout: self.body_timeout.or(file.body_timeout),
            max_connections: self.max_connections.or(file.max_connections),
            cors_origins: self.cors_origins.or(file.cors_origins),
        }
    }

    /// The limits, the connection cap checked against the descriptor limit.
    pub fn limits(&self) -> Result<ConnectionLimits, LimitError> {
        ConnectionLimits::checked(
            seconds("header_timeout", self.header_timeout)?,
            seconds("body_timeout", self.body_timeout)?,
            self.max_connections,
        )
    }

    pub fn cors(&self) -> Result<CorsPolicy, BadOrigin> {
        CorsPolicy::new(self.cors_origins.as_deref().unwrap_or_default())
    }
}

fn seconds(name: &'static str, secs: Option<f64>) -> Result<Option<Duration>, LimitError> {
    secs.map(|s| {
        Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or(LimitError::BadTimeout { name, secs: s })
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_win_over_the_file() {
        let flags = HttpSettings {
            body_timeout: Some(5.0),
            ..HttpSettings::default()
        };
        let file = HttpSettings {
            body_timeout: Some(60.0),
            header_timeout: Some(3.0),
            ..HttpSettings::default()
        };
        let merged = flags.or(file);
        assert_eq!(
            (merged.body_timeout, merged.header_timeout),
            (Some(5.0), Some(3.0))
        );
    }

    #[test]
    fn timeouts_must_be_positive_seconds() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let s = HttpSettings {
                header_timeout: Some(bad),
                ..HttpSettings::default()
            };
            assert!(
                matches!(s.limits(), Err(LimitError::BadTimeout { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_cap_over_the_descriptor_limit_is_refused() {
        let s = HttpSettings {
            max_connections: Some(usize::MAX),
            ..HttpSettings::default()
        };
        assert!(matches!(
            s.limits(),
            Err(LimitError::OverDescriptorLimit { .. })
        ));
        let zero = HttpSettings {
            max_connections: Some(0),
            ..HttpSettings::default()
        };
        assert_eq!(zero.limits(), Err(LimitError::ZeroConnections));
    }
}
