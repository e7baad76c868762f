//! The content-addressed cache of pulled modules: `blobs/sha256/HEX` holds a module whose
//! SHA-256 is HEX, `manifests/sha256/HEX` the module digest a manifest of digest HEX names.
//! A file appears only complete and verified (written beside, checked, renamed), so replicas
//! sharing the folder and a crash mid-download never see a partial module.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The cache folder.
#[derive(Debug, Clone)]
pub struct ModuleCache {
    dir: PathBuf,
}

impl ModuleCache {
    /// A cache in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> ModuleCache {
        ModuleCache { dir }
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn blob_path(&self, hex: &str) -> PathBuf {
        self.dir.join("blobs/sha256").join(hex)
    }

    fn manifest_path(&self, hex: &str) -> PathBuf {
        self.dir.join("manifests/sha256").join(hex)
    }

    /// The module of digest `hex`, if held (and still of that digest: a file changed on
    /// disk is removed, not trusted).
    pub fn module(&self, hex: &str) -> Option<Vec<u8>> {
        let path = self.blob_path(hex);
        let bytes = std::fs::read(&path).ok()?;
        if hex::encode(Sha256::digest(&bytes)) == hex {
            Some(bytes)
        } else {
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// The module digest the manifest of digest `manifest_hex` names, if recorded.
    pub fn module_of_manifest(&self, manifest_hex: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.manifest_path(manifest_hex)).ok()?;
        let hex = text.trim();
        (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| hex.to_string())
    }

    /// Records that the manifest `manifest_hex` names the module `module_hex`.
    pub fn record_manifest(&self, manifest_hex: &str, module_hex: &str) -> std::io::Result<()> {
        write_atomically(&self.manifest_path(manifest_hex), module_hex.as_bytes())
    }

    /// A temporary file in the cache for a download; [`ModuleCache::commit`] makes it visible.
    pub fn temp_file(&self) -> std::io::Result<tempfile::NamedTempFile> {
        let dir = self.dir.join("blobs/sha256");
        std::fs::create_dir_all(&dir)?;
        tempfile::Builder::new()
            .prefix(".partial-")
            .tempfile_in(dir)
    }

    /// Makes a download whose digest was checked to be `hex` visible.
    pub fn commit(&self, temp: tempfile::NamedTempFile, hex: &str) -> std::io::Result<()> {
        temp.as_file().sync_all()?;
        temp.persist(self.blob_path(hex)).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::Builder::new()
        .prefix(".partial-")
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::new(dir.path().to_path_buf());
        let bytes = b"\0asm module".to_vec();
        let hex = hex::encode(Sha256::digest(&bytes));
        let mut temp = cache.temp_file().unwrap();
        std::io::Write::write_all(&mut temp, &bytes).unwrap();
        cache.commit(temp, &hex).unwrap();
        assert_eq!(cache.module(&hex).as_deref(), Some(&bytes[..]));
        std::fs::write(cache.blob_path(&hex), b"tampered").unwrap();
        assert_eq!(cache.module(&hex), None);
        assert!(!cache.blob_path(&hex).exists());
        cache.record_manifest(&"a".repeat(64), &hex).unwrap();
        assert_eq!(cache.module_of_manifest(&"a".repeat(64)), Some(hex));
        assert_eq!(cache.module_of_manifest(&"b".repeat(64)), None);
    }
}
