//! Published contract versions are frozen: an edit in place of a `wit/vX.Y.Z/` file would
//! silently change what plugins built against it get. A new version goes in a new folder
//! (and a new line below); the host keeps loading every version it lists.

use super::SUPPORTED_VERSIONS;
use sha2::{Digest, Sha256};
use std::path::Path;

/// Every published WIT file, relative to `wit/`, with its SHA-256.
const PUBLISHED: &[(&str, &str)] = &[(
    "v0.1.0/plugin.wit",
    "2327f5dc21e36c395b6b4d82d2e6dfea784f099967d0ec155bc000a6f2b4863d",
)];

fn wit_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")
}

#[test]
fn published_wit_files_are_unchanged() {
    for (file, digest) in PUBLISHED {
        let text = std::fs::read(wit_dir().join(file)).unwrap();
        let found = hex::encode(Sha256::digest(&text));
        assert_eq!(
            &found, digest,
            "wit/{file} changed after it was published: put the change in a new version folder"
        );
    }
}

#[test]
fn every_wit_file_is_listed_as_published() {
    for version in std::fs::read_dir(wit_dir()).unwrap() {
        let version = version.unwrap().path();
        for file in std::fs::read_dir(&version).unwrap() {
            let path = file.unwrap().path();
            let rel = path
                .strip_prefix(wit_dir())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            assert!(
                PUBLISHED.iter().any(|(f, _)| *f == rel),
                "wit/{rel} is not in PUBLISHED: add it with its digest once it is released"
            );
        }
    }
}

#[test]
fn every_supported_version_is_published_and_the_sdk_builds_one() {
    for v in SUPPORTED_VERSIONS {
        assert!(
            wit_dir().join(format!("v{v}")).is_dir(),
            "the host supports {v} but wit/v{v} is missing"
        );
    }
    assert!(
        SUPPORTED_VERSIONS.contains(&kubeplug_sdk::CONTRACT_VERSION),
        "the SDK builds contract {} which this host does not load",
        kubeplug_sdk::CONTRACT_VERSION
    );
}
