//! What a provider's prompt cache charges, as multiples of its uncached
//! input price (PROTOCOL.md 12.1): the figures `auto` clearing weighs a
//! batch with.
//!
//! Every price comes from the provider's own documentation (sources in
//! docs/clearing.md, "Prices"), by provider and model family; the file's
//! `[pricing.<provider>]` overrides them for every model of that provider,
//! and a request's `pricing` overrides both. A request that names no model
//! toolwire knows is priced with the provider's default and says so
//! (`source: "default"`).

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::format::Format;

/// Whose cache prices apply.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Anthropic,
    Openai,
    Gemini,
}

impl Provider {
    /// The provider whose API speaks `format`.
    pub fn of(format: Format) -> Provider {
        match format {
            Format::Anthropic => Provider::Anthropic,
            Format::OpenaiChat | Format::OpenaiResponses => Provider::Openai,
            Format::Gemini => Provider::Gemini,
        }
    }
}

/// A price as a multiple of the uncached input price: finite and not
/// negative, refused at its key otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[schemars(transparent)]
pub struct Multiple(#[schemars(range(min = 0.0))] f64);

impl Multiple {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl<'de> Deserialize<'de> for Multiple {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(d)?;
        if value.is_finite() && value >= 0.0 {
            Ok(Multiple(value))
        } else {
            Err(serde::de::Error::custom(format!(
                "a price must be a multiple of the input price, 0 or more (got {value})"
            )))
        }
    }
}

/// One provider's prices, key by key (`[pricing.<provider>]`, or a
/// request's `pricing`); what is left out keeps the documented figure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PriceOverride {
    /// A cached input token, as a multiple of an uncached one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Multiple>,
    /// An input token written to the cache (Anthropic charges a premium;
    /// 1 where writing costs what uncached input costs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Multiple>,
    /// How long the cache outlives the last request that used it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_seconds: Option<u64>,
}

impl PriceOverride {
    fn is_empty(&self) -> bool {
        *self == PriceOverride::default()
    }
}

/// `[pricing]` in `toolwire.toml`: overrides per provider.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PricingConfig {
    #[serde(skip_serializing_if = "PriceOverride::is_empty")]
    pub anthropic: PriceOverride,
    #[serde(skip_serializing_if = "PriceOverride::is_empty")]
    pub openai: PriceOverride,
    #[serde(skip_serializing_if = "PriceOverride::is_empty")]
    pub gemini: PriceOverride,
}

impl PricingConfig {
    pub fn is_default(&self) -> bool {
        *self == PricingConfig::default()
    }

    fn of(&self, provider: Provider) -> &PriceOverride {
        match provider {
            Provider::Anthropic => &self.anthropic,
            Provider::Openai => &self.openai,
            Provider::Gemini => &self.gemini,
        }
    }
}

/// How long the request asked its provider to keep the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CacheTtl {
    /// Anthropic's default `cache_control` lifetime.
    #[serde(rename = "5m")]
    FiveMinutes,
    /// Anthropic `cache_control: {ttl: "1h"}`: writes cost 2×.
    #[serde(rename = "1h")]
    OneHour,
    /// OpenAI `prompt_cache_retention: "24h"`.
    #[serde(rename = "24h")]
    OneDay,
}

/// `pricing` in `budget/apply`'s params: what the request says about the
/// prices it is sent at. The proxy fills it from the request it forwards.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PricingParams {
    /// The model the request is for (`claude-sonnet-4-5`, `gpt-5-codex`,
    /// `gemini-2.5-pro`, …): picks the model family's discount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The cache lifetime the request asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_ttl: Option<CacheTtl>,
    /// Explicit prices, over everything else (see [`PriceOverride`]; the
    /// keys are repeated here rather than flattened, because serde cannot
    /// refuse unknown keys of a struct that flattens another).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<Multiple>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<Multiple>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_seconds: Option<u64>,
}

impl PricingParams {
    fn prices(&self) -> PriceOverride {
        PriceOverride {
            cache_read: self.cache_read,
            cache_write: self.cache_write,
            cache_seconds: self.cache_seconds,
        }
    }
}

/// Where the prices in force came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PriceSource {
    /// The documented prices of the request's model family.
    Model,
    /// No model toolwire knows: the provider's documented default.
    Default,
    /// `[pricing.<provider>]` in the configuration set at least one.
    Configured,
    /// The request's `pricing` set at least one.
    Request,
}

/// The prices one apply weighs clearing with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Prices {
    pub provider: Provider,
    pub cache_read: f64,
    pub cache_write: f64,
    pub cache_seconds: u64,
    pub source: PriceSource,
}

/// Anthropic: reads 0.1×, writes 1.25× for the 5-minute cache and 2× for
/// the 1-hour one, for every Claude model.
const ANTHROPIC_READ: f64 = 0.1;
const ANTHROPIC_WRITE_5M: f64 = 1.25;
const ANTHROPIC_WRITE_1H: f64 = 2.0;

/// The dearest cache documented (Anthropic's 5-minute one: read, write):
/// `auto` also requires a batch to pay at these prices unless prices were
/// set by hand, so that traffic priced at any provider's rates is never
/// made dearer by a clearing decided at another's.
pub const GUARD: (f64, f64) = (ANTHROPIC_READ, ANTHROPIC_WRITE_5M);

/// OpenAI's in-memory cache is cleared "within 5 to 10 minutes of
/// inactivity" and "always" within an hour: only past the hour is it
/// surely gone, which is what `expired` needs.
const OPENAI_SECONDS: u64 = 3_600;
/// Gemini documents no lifetime for implicit caching; an hour, its
/// explicit caches' default, is taken as the time past which it is gone.
const GEMINI_SECONDS: u64 = 3_600;

/// The cached-input multiple of an OpenAI model family, by name prefix
/// (longest first where one prefix starts another).
const OPENAI_FAMILIES: &[(&str, f64)] = &[
    ("gpt-5", 0.1),
    ("codex", 0.1),
    ("gpt-4.1", 0.25),
    ("o3", 0.25),
    ("o4", 0.25),
    ("gpt-4o", 0.5),
    ("o1", 0.5),
];
/// No model known: the current generation's discount.
const OPENAI_DEFAULT_READ: f64 = 0.1;

const GEMINI_FAMILIES: &[(&str, f64)] = &[("gemini-2.5", 0.25), ("gemini-3", 0.1)];
/// No model known: the 2.5 models' discount, the smaller one.
const GEMINI_DEFAULT_READ: f64 = 0.25;

/// A model name as the family tables match it: lower case, without an
/// API's `models/` prefix or a router's `provider/` prefix.
fn family_name(model: &str) -> String {
    let model = model.trim().to_ascii_lowercase();
    match model.rsplit_once('/') {
        Some((_, name)) => name.to_owned(),
        None => model,
    }
}

fn family(table: &[(&str, f64)], model: &str) -> Option<f64> {
    let name = family_name(model);
    table
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix))
        .map(|&(_, read)| read)
}

/// The prices for `provider`, from the model's family, the configuration
/// and the request, each over the one before.
pub fn resolve(
    provider: Provider,
    config: &PricingConfig,
    params: Option<&PricingParams>,
) -> Prices {
    let model = params.and_then(|p| p.model.as_deref());
    let ttl = params.and_then(|p| p.cache_ttl);
    let (read, known) = match provider {
        Provider::Anthropic => (
            ANTHROPIC_READ,
            model.is_some_and(|m| family_name(m).starts_with("claude")),
        ),
        Provider::Openai => match model.and_then(|m| family(OPENAI_FAMILIES, m)) {
            Some(read) => (read, true),
            None => (OPENAI_DEFAULT_READ, false),
        },
        Provider::Gemini => match model.and_then(|m| family(GEMINI_FAMILIES, m)) {
            Some(read) => (read, true),
            None => (GEMINI_DEFAULT_READ, false),
        },
    };
    let (write, seconds) = match (provider, ttl) {
        (Provider::Anthropic, Some(CacheTtl::OneHour)) => (ANTHROPIC_WRITE_1H, 3_600),
        (Provider::Anthropic, _) => (ANTHROPIC_WRITE_5M, 300),
        (Provider::Openai, Some(CacheTtl::OneDay)) => (1.0, 86_400),
        (Provider::Openai, _) => (1.0, OPENAI_SECONDS),
        (Provider::Gemini, _) => (1.0, GEMINI_SECONDS),
    };
    let mut prices = Prices {
        provider,
        cache_read: read,
        cache_write: write,
        cache_seconds: seconds,
        source: if known {
            PriceSource::Model
        } else {
            PriceSource::Default
        },
    };
    let mut over = |o: &PriceOverride, source: PriceSource| {
        if o.is_empty() {
            return;
        }
        if let Some(r) = o.cache_read {
            prices.cache_read = r.get();
        }
        if let Some(w) = o.cache_write {
            prices.cache_write = w.get();
        }
        if let Some(s) = o.cache_seconds {
            prices.cache_seconds = s;
        }
        prices.source = source;
    };
    over(config.of(provider), PriceSource::Configured);
    if let Some(p) = params {
        over(&p.prices(), PriceSource::Request);
    }
    prices
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(model: &str, ttl: Option<CacheTtl>) -> PricingParams {
        PricingParams {
            model: Some(model.into()),
            cache_ttl: ttl,
            ..PricingParams::default()
        }
    }

    #[test]
    fn each_provider_and_family_has_its_documented_prices() {
        let none = PricingConfig::default();
        let p = resolve(
            Provider::Anthropic,
            &none,
            Some(&params("claude-sonnet-4-5", None)),
        );
        assert_eq!(
            (p.cache_read, p.cache_write, p.cache_seconds),
            (0.1, 1.25, 300)
        );
        assert_eq!(p.source, PriceSource::Model);
        let p = resolve(
            Provider::Anthropic,
            &none,
            Some(&params("claude-opus-4-1", Some(CacheTtl::OneHour))),
        );
        assert_eq!((p.cache_write, p.cache_seconds), (2.0, 3_600));
        let p = resolve(Provider::Openai, &none, Some(&params("gpt-4o-mini", None)));
        assert_eq!((p.cache_read, p.cache_write), (0.5, 1.0));
        let p = resolve(
            Provider::Openai,
            &none,
            Some(&params("openai/gpt-4.1", None)),
        );
        assert_eq!(p.cache_read, 0.25);
        let p = resolve(
            Provider::Openai,
            &none,
            Some(&params("gpt-5-codex", Some(CacheTtl::OneDay))),
        );
        assert_eq!((p.cache_read, p.cache_seconds), (0.1, 86_400));
        let p = resolve(
            Provider::Gemini,
            &none,
            Some(&params("models/gemini-2.5-pro", None)),
        );
        assert_eq!((p.cache_read, p.source), (0.25, PriceSource::Model));
    }

    #[test]
    fn an_unknown_model_falls_back_to_the_default_and_says_so() {
        let none = PricingConfig::default();
        for provider in [Provider::Anthropic, Provider::Openai, Provider::Gemini] {
            let p = resolve(provider, &none, Some(&params("my-finetune", None)));
            assert_eq!(p.source, PriceSource::Default, "{provider:?}");
            assert_eq!(resolve(provider, &none, None).source, PriceSource::Default);
        }
    }

    #[test]
    fn the_file_overrides_the_family_and_the_request_overrides_the_file() {
        let config: PricingConfig =
            serde_json::from_value(serde_json::json!({"openai": {"cacheRead": 0.3}})).unwrap();
        let p = resolve(Provider::Openai, &config, Some(&params("gpt-5", None)));
        assert_eq!((p.cache_read, p.source), (0.3, PriceSource::Configured));
        let mut request = params("gpt-5", None);
        request.cache_seconds = Some(60);
        let p = resolve(Provider::Openai, &config, Some(&request));
        assert_eq!((p.cache_read, p.cache_seconds), (0.3, 60));
        assert_eq!(p.source, PriceSource::Request);
    }

    #[test]
    fn a_negative_price_is_refused() {
        let err = serde_json::from_value::<PricingConfig>(
            serde_json::json!({"anthropic": {"cacheWrite": -1.0}}),
        )
        .unwrap_err();
        assert!(err.to_string().contains("0 or more"), "{err}");
    }
}
