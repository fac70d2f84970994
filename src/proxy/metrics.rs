//! What the proxy counts for `GET /metrics` (PROTOCOL.md 12.3), kept in
//! `prometheus-client`'s families and written in the OpenMetrics text
//! format Prometheus scrapes.
//!
//! Labels are few on purpose: the provider, the route (the conversation
//! format, or `other` for a passed-through path), the outcome or kind, and
//! the tenant only when `[proxy] metrics_by_tenant` asks for it. Session
//! ids, models and status codes never become labels: each value of a label
//! is a series Prometheus keeps.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `toolwire_proxy_requests_total` | outcome | requests answered |
//! | `toolwire_proxy_received_bytes_total` | | request body bytes from agents |
//! | `toolwire_proxy_sent_bytes_total` | | request body bytes forwarded upstream |
//! | `toolwire_proxy_input_tokens_total` | kind | the providers' input tokens: `uncached`, `cache_write`, `cache_read` |
//! | `toolwire_proxy_output_tokens_total` | | the providers' output tokens |
//! | `toolwire_proxy_results_persisted_total` | | tool results saved and replaced by a preview |
//! | `toolwire_proxy_results_cleared_total` | | old results cleared |
//! | `toolwire_proxy_repairs_total` | | requests whose pairing was repaired |
//! | `toolwire_proxy_errors_total` | kind | see [`ErrorKind`] |
//! | `toolwire_proxy_added_latency_seconds` | | from the whole body received to the request leaving for upstream |

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::route::Provider;
use super::stats::Record;

/// The content type of [`Metrics::encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The labels every series has: where a request went, and for whom.
#[derive(Debug, Clone, Hash, PartialEq, Eq)]
pub struct Labels {
    pub provider: &'static str,
    /// The route's conversation format, or `other`.
    pub route: &'static str,
    /// Set only with `[proxy] metrics_by_tenant`.
    pub tenant: Option<Arc<str>>,
}

impl EncodeLabelSet for Labels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        ("provider", self.provider).encode(encoder.encode_label())?;
        ("route", self.route).encode(encoder.encode_label())?;
        if let Some(tenant) = &self.tenant {
            ("tenant", tenant.as_ref()).encode(encoder.encode_label())?;
        }
        Ok(())
    }
}

impl Labels {
    pub fn new(provider: Provider, route: &'static str, tenant: Option<Arc<str>>) -> Labels {
        Labels {
            provider: provider.name(),
            route,
            tenant,
        }
    }
}

/// One forwarded request's part in the metrics, carried from the moment
/// its body is in to the end of its response.
pub struct Observer {
    pub metrics: Arc<Metrics>,
    pub labels: Labels,
    /// Bytes of the request body as the agent sent it.
    pub received: u64,
    /// When the whole body was in.
    pub started: std::time::Instant,
}

impl Observer {
    /// The request leaves now with a body of `sent` bytes.
    pub fn forwarding(&self, sent: u64) {
        self.metrics
            .forwarding(&self.labels, self.received, sent, self.started.elapsed());
    }

    pub fn finished(&self, record: &Record, reached: bool) {
        self.metrics.finished(&self.labels, record, reached);
    }
}

/// The labels and one more (`outcome` or `kind`).
type With = (Labels, [(&'static str, &'static str); 1]);

/// Why the proxy counted an error. Its own refusals, the upstream's, and
/// budgeting that could not run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No valid token (401).
    Unauthorized,
    /// A path the proxy does not serve (404).
    NoRoute,
    /// A body over `proxy.maxRequestBytes` (413).
    TooLarge,
    /// A body slower than `proxy.bodyTimeoutSeconds` (408).
    BodyTimeout,
    /// A request the proxy could not read or forward as sent (400).
    BadRequest,
    /// The upstream could not be reached (502).
    UpstreamUnreachable,
    /// The upstream answered 4xx or 5xx.
    UpstreamStatus,
    /// The response stopped before its end (either side hung up).
    StreamBroken,
    /// Budgeting failed; the request went on degraded (PROTOCOL.md 11.1).
    BudgetFailed,
}

impl ErrorKind {
    fn label(self) -> &'static str {
        match self {
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::NoRoute => "no_route",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::BodyTimeout => "body_timeout",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::UpstreamUnreachable => "upstream_unreachable",
            ErrorKind::UpstreamStatus => "upstream_status",
            ErrorKind::StreamBroken => "stream_broken",
            ErrorKind::BudgetFailed => "budget_failed",
        }
    }
}

/// Every series the proxy keeps, and the registry that writes them.
pub struct Metrics {
    registry: Registry,
    requests: Family<With, Counter>,
    received_bytes: Family<Labels, Counter>,
    sent_bytes: Family<Labels, Counter>,
    input_tokens: Family<With, Counter>,
    output_tokens: Family<Labels, Counter>,
    persisted: Family<Labels, Counter>,
    cleared: Family<Labels, Counter>,
    repairs: Family<Labels, Counter>,
    errors: Family<With, Counter>,
    added_latency: Family<Labels, Histogram>,
}

/// Buckets of the added latency, in seconds: 0.5 ms to about 8 s
/// (budgeting a small request takes well under a millisecond; saving a
/// large output to object storage, or waiting for PostgreSQL, seconds).
fn latency_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.0005, 2.0, 15,
    ))
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("toolwire_proxy");
        let requests = Family::default();
        let received_bytes = Family::default();
        let sent_bytes = Family::default();
        let input_tokens = Family::default();
        let output_tokens = Family::default();
        let persisted = Family::default();
        let cleared = Family::default();
        let repairs = Family::default();
        let errors = Family::default();
        let added_latency =
            Family::<Labels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "requests",
            "Requests answered, by outcome (ok, upstream_error, incomplete, unreachable, refused)",
            requests.clone(),
        );
        registry.register(
            "received_bytes",
            "Request body bytes received from agents",
            received_bytes.clone(),
        );
        registry.register(
            "sent_bytes",
            "Request body bytes forwarded upstream (after budgeting)",
            sent_bytes.clone(),
        );
        registry.register(
            "input_tokens",
            "Input tokens the providers reported, by kind (uncached, cache_write, cache_read)",
            input_tokens.clone(),
        );
        registry.register(
            "output_tokens",
            "Output tokens the providers reported",
            output_tokens.clone(),
        );
        registry.register(
            "results_persisted",
            "Tool results saved whole and replaced by a preview",
            persisted.clone(),
        );
        registry.register(
            "results_cleared",
            "Old tool results cleared",
            cleared.clone(),
        );
        registry.register(
            "repairs",
            "Requests whose tool call pairing was repaired",
            repairs.clone(),
        );
        registry.register("errors", "Errors, by kind", errors.clone());
        registry.register(
            "added_latency_seconds",
            "Time from a request's whole body received to its leaving for upstream",
            added_latency.clone(),
        );
        Metrics {
            registry,
            requests,
            received_bytes,
            sent_bytes,
            input_tokens,
            output_tokens,
            persisted,
            cleared,
            repairs,
            errors,
            added_latency,
        }
    }

    /// The OpenMetrics text of every series.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail; an error here would be the
        // crate's own, and a partial text is still worth a scrape.
        if let Err(err) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%err, "encoding the metrics failed");
        }
        text
    }

    /// A request the proxy answered itself, forwarding nothing.
    pub fn refused(&self, labels: &Labels, kind: ErrorKind) {
        self.requests
            .get_or_create(&(labels.clone(), [("outcome", "refused")]))
            .inc();
        self.error(labels, kind);
    }

    pub fn error(&self, labels: &Labels, kind: ErrorKind) {
        self.errors
            .get_or_create(&(labels.clone(), [("kind", kind.label())]))
            .inc();
    }

    /// A request about to leave for upstream: its bytes before and after
    /// budgeting, and what the proxy added to its latency.
    pub fn forwarding(&self, labels: &Labels, received: u64, sent: u64, added: Duration) {
        self.received_bytes.get_or_create(labels).inc_by(received);
        self.sent_bytes.get_or_create(labels).inc_by(sent);
        self.added_latency
            .get_or_create(labels)
            .observe(added.as_secs_f64());
    }

    /// A forwarded request whose response has ended, or, when not
    /// `reached`, whose upstream could not be reached.
    pub fn finished(&self, labels: &Labels, record: &Record, reached: bool) {
        let outcome = if !reached {
            "unreachable"
        } else if !record.complete {
            "incomplete"
        } else if record.status >= 400 {
            "upstream_error"
        } else {
            "ok"
        };
        self.requests
            .get_or_create(&(labels.clone(), [("outcome", outcome)]))
            .inc();
        match outcome {
            "unreachable" => self.error(labels, ErrorKind::UpstreamUnreachable),
            "incomplete" => self.error(labels, ErrorKind::StreamBroken),
            "upstream_error" => self.error(labels, ErrorKind::UpstreamStatus),
            _ => {}
        }
        let add = |family: &Family<Labels, Counter>, n: u64| {
            if n > 0 {
                family.get_or_create(labels).inc_by(n);
            }
        };
        add(&self.persisted, record.results_persisted);
        add(&self.cleared, record.results_cleared);
        add(&self.repairs, u64::from(record.repaired));
        if let Some(usage) = record.usage {
            for (kind, n) in [
                ("uncached", usage.input),
                ("cache_write", usage.cache_creation),
                ("cache_read", usage.cache_read),
            ] {
                self.input_tokens
                    .get_or_create(&(labels.clone(), [("kind", kind)]))
                    .inc_by(n);
            }
            self.output_tokens
                .get_or_create(labels)
                .inc_by(usage.output);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::usage::Usage;

    #[test]
    fn a_finished_request_is_counted_by_outcome_and_token_kind() {
        let metrics = Metrics::new();
        let labels = Labels::new(Provider::Anthropic, "anthropic", None);
        metrics.forwarding(&labels, 100, 40, Duration::from_millis(2));
        metrics.finished(
            &labels,
            &Record {
                status: 200,
                complete: true,
                results_persisted: 2,
                usage: Some(Usage {
                    input: 5,
                    cache_read: 90,
                    cache_creation: 3,
                    output: 7,
                }),
                ..Record::default()
            },
            true,
        );
        metrics.refused(&labels, ErrorKind::TooLarge);
        let text = metrics.encode();
        for line in [
            r#"toolwire_proxy_requests_total{provider="anthropic",route="anthropic",outcome="ok"} 1"#,
            r#"toolwire_proxy_requests_total{provider="anthropic",route="anthropic",outcome="refused"} 1"#,
            r#"toolwire_proxy_input_tokens_total{provider="anthropic",route="anthropic",kind="cache_read"} 90"#,
            r#"toolwire_proxy_input_tokens_total{provider="anthropic",route="anthropic",kind="cache_write"} 3"#,
            r#"toolwire_proxy_results_persisted_total{provider="anthropic",route="anthropic"} 2"#,
            r#"toolwire_proxy_received_bytes_total{provider="anthropic",route="anthropic"} 100"#,
            r#"toolwire_proxy_errors_total{provider="anthropic",route="anthropic",kind="too_large"} 1"#,
            r#"toolwire_proxy_added_latency_seconds_count{provider="anthropic",route="anthropic"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "no {line} in\n{text}");
        }
        assert!(!text.contains("tenant"), "{text}");
    }

    #[test]
    fn the_tenant_is_a_label_only_when_given() {
        let metrics = Metrics::new();
        let labels = Labels::new(Provider::OpenAi, "openai-chat", Some("team-a".into()));
        metrics.refused(&labels, ErrorKind::Unauthorized);
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"{provider="openai",route="openai-chat",tenant="team-a",outcome="refused"} 1"#
            ),
            "{text}"
        );
    }
}
