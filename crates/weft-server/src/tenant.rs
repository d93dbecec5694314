//! Which tenant a request belongs to.

use http::HeaderMap;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Tenancy: how a request names its tenant.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Tenancy")]
pub struct TenantOptions {
    /// Require X-Scope-OrgID on every request; otherwise every request is tenant "single-tenant".
    #[arg(long, env = "WEFT_MULTITENANCY", action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", default_value_t = false)]
    pub multitenancy: bool,
    /// Tenant of spans received over UDP, which has no headers.
    #[arg(long, env = "WEFT_UDP_TENANT", default_value = SINGLE_TENANT)]
    pub udp_tenant: String,
    /// Bearer token → tenant (the config file's `auth_tokens`). When non-empty, every request
    /// needs a listed token.
    #[arg(skip)]
    pub auth_tokens: BTreeMap<String, String>,
}

impl TenantOptions {
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        for t in self.auth_tokens.values() {
            weft_admission::limits::validate_tenant(t).map_err(|e| anyhow::anyhow!("auth_tokens: {e}"))?;
        }
        Ok(())
    }
}

/// The tenant used when multi-tenancy is off (the Tempo convention).
pub const SINGLE_TENANT: &str = "single-tenant";
pub const ORG_HEADER: &str = "x-scope-orgid";

/// Resolves tenants from headers.
#[derive(Debug)]
pub struct Tenants {
    multitenancy: bool,
    tokens: HashMap<String, Arc<str>>,
    single: Arc<str>,
}

/// Why a request has no usable tenant; always answered with 401 / UNAUTHENTICATED.
#[derive(Debug)]
pub struct TenantError(pub String);

impl std::fmt::Display for TenantError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TenantError {}

impl Tenants {
    pub fn new(cfg: &TenantOptions) -> Self {
        Tenants {
            multitenancy: cfg.multitenancy,
            tokens: cfg
                .auth_tokens
                .iter()
                .map(|(k, v)| (k.clone(), Arc::from(v.as_str())))
                .collect(),
            single: Arc::from(SINGLE_TENANT),
        }
    }

    /// Whether requests must carry a bearer token.
    pub fn tokens_required(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Returns the request's tenant.
    ///
    /// With `auth_tokens` configured, the bearer token decides the tenant (a request without a
    /// listed token is refused). Otherwise, with multi-tenancy on, `X-Scope-OrgID` names it;
    /// with it off, every request is `single-tenant`.
    pub fn resolve(&self, headers: &HeaderMap) -> Result<Arc<str>, TenantError> {
        if !self.tokens.is_empty() {
            let auth = headers
                .get(http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            // The scheme is case-insensitive (RFC 9110 §11.1): `Bearer`, `bearer`, `BEARER`.
            let token = auth
                .split_once(' ')
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim());
            return match token.and_then(|t| self.tokens.get(t)) {
                Some(t) => Ok(t.clone()),
                None if token.is_none() => Err(TenantError("missing bearer token in the Authorization header".into())),
                None => Err(TenantError("invalid bearer token".into())),
            };
        }
        if !self.multitenancy {
            return Ok(self.single.clone());
        }
        let Some(v) = headers.get(ORG_HEADER) else {
            return Err(TenantError(
                "no org id: the X-Scope-OrgID header is required when multi-tenancy is enabled".into(),
            ));
        };
        let t = v
            .to_str()
            .map_err(|_| TenantError("X-Scope-OrgID is not valid ASCII".into()))?
            .trim();
        weft_admission::limits::validate_tenant(t).map_err(|e| TenantError(format!("invalid X-Scope-OrgID: {e}")))?;
        Ok(Arc::from(t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        let cfg = TenantOptions {
            multitenancy: false,
            udp_tenant: SINGLE_TENANT.into(),
            auth_tokens: [("s3cret".to_owned(), "team-a".to_owned())].into(),
        };
        let t = Tenants::new(&cfg);
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            let mut h = HeaderMap::new();
            h.insert(http::header::AUTHORIZATION, format!("{scheme} s3cret").parse().unwrap());
            assert_eq!(&*t.resolve(&h).unwrap(), "team-a", "{scheme}");
        }
        let mut h = HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "Basic s3cret".parse().unwrap());
        assert!(t.resolve(&h).is_err());
    }
}
