//! Progress bars on stderr (indicatif hides them when stderr is not a terminal).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Files smaller than this get no bar (it would only flash).
pub(crate) const MIN_BAR_BYTES: u64 = 8 << 20;

/// A byte-counting bar of `len` bytes labelled `msg`, drawn on stderr; hidden for small `len`.
pub(crate) fn bytes_bar(len: u64, msg: String) -> ProgressBar {
    if len < MIN_BAR_BYTES {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(msg);
    bar
}
