//! Pulls that verify first: the tag resolved to a digest, that digest's signatures checked
//! against the verification config, and only then the module pulled by that digest. What
//! `kubeplug pull`, `eval --plugin oci://` and `run --plugin oci://` call.

use super::{ConfigFileError, VerificationConfig, Verified, VerifyError, verify_with};
use crate::oci::access::Access;
use crate::oci::fetch::FetchError;
use crate::oci::pull_error::PullError;
use crate::oci::reference::OciRef;
use crate::oci::registry::{Registries, RegistryArgs};
use crate::oci::signature;
use crate::oci::transfer::{self, Pulled};

/// A tag that could not be resolved to its manifest's digest.
#[derive(Debug, thiserror::Error)]
#[error("resolving {reference}: {fault}")]
pub struct ResolveError {
    /// The reference resolved.
    pub reference: String,
    /// The manifest read's failure.
    pub fault: FetchError,
}

/// A verified pull that failed, by step.
#[derive(Debug, thiserror::Error)]
pub enum VerifiedPullError {
    /// The `--verification-config` file is not usable.
    #[error(transparent)]
    Config(#[from] ConfigFileError),
    /// The tag could not be resolved.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The module is not signed as required, or its signatures could not be read.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// The verified module could not be pulled.
    #[error(transparent)]
    Pull(#[from] PullError),
    /// The manifest pulled is not the one verified.
    #[error("{pinned}: pulled manifest sha256:{pulled} is not the verified one")]
    NotVerified {
        /// The reference verified, pinned.
        pinned: String,
        /// The digest of the manifest pulled.
        pulled: String,
    },
}

/// The verification config the registry flags name (`--verification-config`), checked; none
/// when not given.
pub fn config_of(args: &RegistryArgs) -> Result<Option<VerificationConfig>, ConfigFileError> {
    args.verification_config
        .as_deref()
        .map(VerificationConfig::from_file)
        .transpose()
}

/// Pulls the module `r` names, verified first when `args` name a verification config
/// (`--verification-config`): what `kubeplug pull` and `kubeplug eval --plugin oci://` call.
/// Without a config it is [`transfer::pull`].
pub async fn pull_verified(
    reg: &Registries,
    r: &OciRef,
    args: &RegistryArgs,
) -> Result<Pulled, VerifiedPullError> {
    match config_of(args)? {
        None => Ok(transfer::pull(reg, r).await?),
        Some(config) => Ok(pull_with(reg, r, &config, &reg.access()).await?.0),
    }
}

/// Pulls the module `r` names after checking its signatures against `config`, with `auth`
/// (a Plugin's pull secret, or the registry flags'): the tag resolved once (a bounded
/// manifest read), the signatures of that digest verified, and only then the module pulled
/// by that digest, so what is returned is what was verified. An unsigned or wrongly signed
/// module is never downloaded. [`VerifiedPullError::Verify`] when verification failed (its
/// `is_transient` tells a registry failure from a module not signed as required).
pub async fn pull_with(
    reg: &Registries,
    r: &OciRef,
    config: &VerificationConfig,
    access: &Access,
) -> Result<(Pulled, Verified), VerifiedPullError> {
    let pinned = resolve(reg, r, access).await?;
    let verified = verify_with(reg, &pinned, config, access).await?;
    tracing::info!(module = %pinned, "{verified}");
    let pulled = transfer::pull_with(reg, &pinned, access).await?;
    if pulled.manifest_digest != verified.digest {
        return Err(VerifiedPullError::NotVerified {
            pinned: pinned.to_string(),
            pulled: pulled.manifest_digest,
        });
    }
    Ok((pulled, verified))
}

/// `r` pinned to its manifest's digest: itself when pinned, else the tag's manifest read
/// (bounded) and its digest taken.
pub async fn resolve(
    reg: &Registries,
    r: &OciRef,
    access: &Access,
) -> Result<OciRef, ResolveError> {
    if r.digest.is_some() {
        return Ok(r.clone());
    }
    let manifest = reg
        .fetch
        .manifest(
            r,
            r.tag_or_default(),
            signature::MODULE_MANIFEST_TYPES,
            access,
        )
        .await
        .map_err(|fault| ResolveError {
            reference: r.to_string(),
            fault,
        })?;
    Ok(r.pinned(&manifest.digest))
}
