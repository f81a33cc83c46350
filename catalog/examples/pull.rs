//! Pulls (or resolves) catalog entries from the command line, until `cinder pull` exists:
//! `cargo run --release -p cinder-catalog --example pull -- [--force] [--list] NAME_OR_PATH...`

use cinder_catalog::{Cache, PullOptions};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), cinder_catalog::CatalogError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let force = args.iter().any(|a| a == "--force");
    let cache = Cache::from_env();
    if args.iter().any(|a| a == "--list") {
        for e in cinder_catalog::entries() {
            let state = if cache.is_present(e) { "cached" } else { "-" };
            let mb = e.total_size() as f64 / 1e6;
            println!(
                "{:30} {:22} {mb:8.1} MB  {state:6}  {}",
                e.name, e.kind, e.description
            );
        }
    }
    for model in args.iter().filter(|a| !a.starts_with("--")) {
        if force {
            let pulled = cache.pull(model, PullOptions { force })?;
            println!("{}", pulled.main.display());
        } else {
            let r = cache.resolve(model)?;
            println!(
                "{} ({})",
                r.path.display(),
                r.kind.map(|k| k.as_str()).unwrap_or("?")
            );
        }
    }
    Ok(())
}
