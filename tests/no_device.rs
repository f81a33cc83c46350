//! An accelerator backend that finds no device is refused with an error naming the backend and
//! what was looked for, on every command, never a panic or a hang. The Vulkan loader is pointed
//! at a driver manifest that does not exist, so it finds no adapter (not even lavapipe).
//!
//! Runs where wgpu is compiled in (CI's backend pass).

#[cfg(feature = "wgpu")]
mod wgpu {
    use std::process::Command;
    use std::time::Duration;

    fn cinder_without_vulkan_driver(args: &[&str]) -> (bool, String) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cinder"))
            .args(args)
            .env("VK_ICD_FILENAMES", "/nonexistent/vulkan-icd.json")
            .env("VK_DRIVER_FILES", "/nonexistent/vulkan-icd.json")
            .env("RUST_BACKTRACE", "0")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cinder starts");
        // A hang is a failure: every command must give up at once.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if child.try_wait().expect("wait").is_some() {
                break;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("cinder {args:?} hangs without a device");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output().expect("output");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn every_command_names_the_missing_device() {
        let model = cinder::catalog::resolve("smollm2-135m")
            .expect("model")
            .path;
        let model = model.to_str().unwrap_or_default();
        let cases: [&[&str]; 6] = [
            &["run", model, "--prompt", "hi", "--backend", "wgpu"],
            &[
                "perplexity",
                model,
                "--file",
                "lee-corpus",
                "--backend",
                "wgpu",
            ],
            &["bench", model, "--backend", "wgpu", "--reps", "1"],
            &["serve", model, "--backend", "wgpu", "--port", "0"],
            &[
                "embed",
                "all-minilm-l6-v2",
                "--backend",
                "wgpu",
                "--text",
                "hi",
            ],
            // layer offload asks for the accelerator while loading
            &["run", model, "--prompt", "hi", "--gpu-layers", "3"],
        ];
        for args in cases {
            let (ok, err) = cinder_without_vulkan_driver(args);
            assert!(!ok, "cinder {args:?} succeeded without a device");
            assert!(
                err.contains("no wgpu device: looked for a Vulkan adapter"),
                "cinder {args:?}: {err}"
            );
            assert!(!err.contains("panicked"), "cinder {args:?}: {err}");
        }
    }
}
