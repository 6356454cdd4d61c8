//! A progress bar on a terminal while a model is read or quantized. The library reports the
//! layers it has read as `tracing` events with the fields [`LAYERS_DONE`] and [`LAYERS_TOTAL`];
//! on a terminal this layer draws them as a bar (and the log leaves them out), elsewhere they
//! are log lines like any other (`logging`).

use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use qwen35::loader::{LAYERS_DONE, LAYERS_TOTAL};
use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer};

/// The bar being drawn on stderr (indicatif draws nothing where stderr is not a terminal), if a
/// read is under way; shared with [`Stderr`], which clears it while a log line is written.
#[derive(Clone, Default)]
pub struct Bar {
    current: Arc<Mutex<Option<ProgressBar>>>,
}

impl Bar {
    fn current(&self) -> MutexGuard<'_, Option<ProgressBar>> {
        self.current.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the bar to `done` of `total` layers, starting it on the first event and clearing it
    /// on the last.
    fn advance(&self, done: u64, total: u64) {
        let mut current = self.current();
        let bar = current.get_or_insert_with(|| {
            let style = ProgressStyle::with_template("weights [{bar:40}] {pos}/{len} layers, {elapsed}")
                .expect("a valid template")
                .progress_chars("=> ");
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr()).with_style(style)
        });
        bar.set_length(total);
        bar.set_position(done);
        if done >= total {
            bar.finish_and_clear();
            *current = None;
        }
    }

    /// The bar's `(position, length)` while one is drawn.
    #[cfg(test)]
    fn state(&self) -> Option<(u64, Option<u64>)> {
        self.current().as_ref().map(|bar| (bar.position(), bar.length()))
    }
}

/// Whether an event is a progress event (it has the layer counts): the log leaves these out
/// while a bar draws them.
pub fn is_progress(metadata: &Metadata<'_>) -> bool {
    metadata.fields().field(LAYERS_DONE).is_some() && metadata.fields().field(LAYERS_TOTAL).is_some()
}

impl<S: Subscriber> Layer<S> for Bar {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if !is_progress(event.metadata()) {
            return;
        }
        let mut counts = Counts::default();
        event.record(&mut counts);
        if let (Some(done), Some(total)) = (counts.done, counts.total) {
            self.advance(done, total);
        }
    }
}

/// The layer counts of a progress event.
#[derive(Default)]
struct Counts {
    done: Option<u64>,
    total: Option<u64>,
}

impl Visit for Counts {
    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            LAYERS_DONE => self.done = Some(value),
            LAYERS_TOTAL => self.total = Some(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// stderr for the log's lines: a line written while the bar is drawn clears the bar, is written,
/// and the bar is drawn again below it.
#[derive(Clone)]
pub struct Stderr(pub Bar);

impl Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.current().as_ref() {
            Some(bar) => bar.suspend(|| std::io::stderr().write(buf)),
            None => std::io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> MakeWriter<'a> for Stderr {
    type Writer = Stderr;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn progress_events_move_the_bar_and_the_last_clears_it() {
        let bar = Bar::default();
        let subscriber = tracing_subscriber::registry().with(bar.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("loading");
            assert_eq!(bar.state(), None, "an event without the counts draws no bar");
            tracing::info!(layers_done = 3usize, layers_total = 40usize, "weights read");
            assert_eq!(bar.state(), Some((3, Some(40))));
            tracing::info!(layers_done = 8usize, layers_total = 40usize, "weights read");
            assert_eq!(bar.state(), Some((8, Some(40))));
            tracing::info!(layers_done = 40usize, layers_total = 40usize, "weights read");
            assert_eq!(bar.state(), None, "the last layer clears the bar");
        });
    }
}
