//! What the plugins and policies directories hold right now.

use super::error::ReloadError;
use crate::contract::text::shown_max;
use crate::controller::InstanceName;
use sha2::{Digest, Sha256};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The `*.wasm` files in `dir`, sorted, following symlinks. Hidden entries (`.name`: editor
/// temporaries, a ConfigMap volume's `..data` and timestamped directories) are not plugins.
pub(crate) fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, ReloadError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ReloadError::ReadDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_plugin_name(p.file_name()))
        .filter(|p| p.is_file())
        .collect();
    paths.sort();
    Ok(paths)
}

/// Whether a directory entry named `name` may be a plugin.
fn is_plugin_name(name: Option<&OsStr>) -> bool {
    let Some(name) = name.and_then(OsStr::to_str) else {
        return false;
    };
    !name.starts_with('.') && name.len() > ".wasm".len() && name.ends_with(".wasm")
}

/// The instance a plugin file runs as: its name without `.wasm`, which must be a DNS-1123
/// label. The name the plugin declares has no say, so a file cannot choose the policy, queue
/// or field manager it gets.
pub(crate) fn instance_name(path: &Path) -> Result<InstanceName, String> {
    let file = path.file_name().map(|n| n.to_string_lossy());
    let stem = file.as_deref().and_then(|n| n.strip_suffix(".wasm"));
    let Some(stem) = stem else {
        return Err(format!("{} is not a .wasm file", path.display()));
    };
    InstanceName::parse(stem).map_err(|why| {
        format!(
            "file name {}: the instance name is the file's name without .wasm, and {why}; the file is not started",
            shown_max(file.as_deref().unwrap_or_default(), 256)
        )
    })
}

/// The policy file of plugin instance `name`.
pub(crate) fn policy_file(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.policy.yaml"))
}

/// SHA-256 of `bytes`, hex.
pub(crate) fn digest(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_visible_wasm_files_are_plugins() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "a.wasm",
            "b.wasm",
            ".c.wasm.swp",
            ".d.wasm",
            "e.wasm.tmp",
            "f.wasm~",
            "policy.yaml",
            ".wasm",
        ] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join("g.wasm")).unwrap();
        let found: Vec<String> = plugin_files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(found, ["a.wasm", "b.wasm"]);
    }

    #[cfg(unix)]
    #[test]
    fn configmap_layout_is_followed_through_its_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("..2026_11_22_07_00_00.1");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("p.wasm"), b"x").unwrap();
        std::os::unix::fs::symlink(&data, dir.path().join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/p.wasm", dir.path().join("p.wasm")).unwrap();
        std::os::unix::fs::symlink("..data/gone.wasm", dir.path().join("gone.wasm")).unwrap();
        let found = plugin_files(dir.path()).unwrap();
        assert_eq!(
            found,
            [dir.path().join("p.wasm")],
            "dangling links are skipped"
        );
    }

    #[test]
    fn the_instance_is_named_by_the_file() {
        let name = |f: &str| instance_name(&Path::new("/plugins").join(f));
        assert_eq!(name("image-pinner.wasm").as_deref(), Ok("image-pinner"));
        for bad in [
            "Image-Pinner.wasm",
            "a.b.wasm",
            "a_b.wasm",
            "-a.wasm",
            "image-pinner.wasm.wasm",
        ] {
            let err = name(bad).unwrap_err();
            assert!(
                err.contains(bad) && err.contains("DNS-1123") && err.contains("not started"),
                "{err}"
            );
        }
        let long = format!("{}.wasm", "a".repeat(64));
        assert!(name(&long).unwrap_err().contains("64 bytes"));
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_it() {
        let err = plugin_files(Path::new("/nonexistent/plugins")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/plugins"), "{err}");
    }
}
