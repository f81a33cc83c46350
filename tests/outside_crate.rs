//! A program written from the book's Getting started alone, in a crate of its own outside the
//! workspace: the dependency line and the program are taken from `book/src/getting-started.md` as
//! a reader would copy them (the git source pointed at this checkout), built with default features
//! off, and run.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The text of the first fenced block of `lang` after `heading` in `doc`.
fn block(doc: &str, heading: &str, lang: &str) -> String {
    let rest = &doc[doc.find(heading).expect("the section is in the book")..];
    let start = rest
        .find(&format!("```{lang}\n"))
        .expect("a code block of that kind")
        + lang.len()
        + 4;
    let len = rest[start..].find("```").expect("the block ends");
    rest[start..start + len].to_string()
}

#[test]
fn getting_started_program_builds_and_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let book = std::fs::read_to_string(root.join("book/src/getting-started.md")).expect("book");
    let toml = block(&book, "## From Rust", "toml");
    let dep = toml
        .lines()
        .find(|l| l.starts_with("cinder ="))
        .expect("the dependency line");
    assert!(dep.contains("default-features = false"), "{dep}");
    let dep = dep.replace(
        "git = \"…\"",
        &format!("path = {:?}", root.display().to_string()),
    );
    let program = block(&book, "## From Rust", "rust,no_run");
    let code_lines = program
        .lines()
        .filter(|l| {
            !l.trim().is_empty() && !l.trim().starts_with("//") && !l.trim().starts_with("use ")
        })
        .count();
    // fn main, three statements, Ok(()), and the closing brace.
    assert!(code_lines <= 7, "{code_lines} lines:\n{program}");

    let dir = tempfile::tempdir().expect("tmp");
    let krate = dir.path().join("first-token");
    std::fs::create_dir_all(krate.join("src")).expect("mkdir");
    // The workspace's release profile and lock file: the build reuses the dependencies already
    // compiled for the workspace instead of resolving and building them anew.
    let manifest = format!(
        "[package]\nname = \"first-token\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
         [dependencies]\n{dep}\n\n[profile.release]\nopt-level = 3\ndebug = false\nincremental = true\n\n\
         [workspace]\n"
    );
    std::fs::write(krate.join("Cargo.toml"), manifest).expect("manifest");
    std::fs::write(krate.join("src/main.rs"), &program).expect("main.rs");
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).expect("lock");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let build = Command::new(&cargo)
        .args(["build", "--release", "--quiet"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo runs");
    assert!(
        build.status.success(),
        "the Getting started program does not build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let bin: &Path = &target.join("release/first-token");
    let run = Command::new(bin).output().expect("the program runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(out.contains("Paris"), "stdout: {out}");
}
