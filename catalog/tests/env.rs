//! `cache_dir()` and its environment variables (one test: the environment is process-wide).

use std::path::PathBuf;

#[test]
fn cache_dir_honours_cinder_home_then_home() {
    // SAFETY: this test binary has a single test, so no other thread reads the environment.
    unsafe {
        std::env::set_var("CINDER_HOME", "/somewhere/cinder-home");
        std::env::set_var("HOME", "/home/someone");
    }
    assert_eq!(
        cinder_catalog::cache_dir(),
        PathBuf::from("/somewhere/cinder-home")
    );
    assert_eq!(
        cinder_catalog::Cache::from_env().model_dir("smollm2-135m"),
        PathBuf::from("/somewhere/cinder-home/models/smollm2-135m")
    );
    unsafe {
        std::env::set_var("CINDER_HOME", "");
    }
    assert_eq!(
        cinder_catalog::cache_dir(),
        PathBuf::from("/home/someone/.cache/cinder")
    );
    unsafe {
        std::env::remove_var("CINDER_HOME");
    }
    assert_eq!(
        cinder_catalog::cache_dir(),
        PathBuf::from("/home/someone/.cache/cinder")
    );
}
