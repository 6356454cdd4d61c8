//! A model folder that changes while it is read. The loader reads the shards by memory map
//! (`qwen35::checkpoint`), and a shard truncated while it is mapped makes the next read of a
//! page past its new end fault with SIGBUS, which ends the process without a word. While a
//! folder is read, SIGBUS is caught instead: the process says which folder changed and exits
//! with status 1. Once loaded, the model holds its own copy of every weight, and the signal's
//! default comes back.

use std::path::Path;

/// Runs `read`, which reads the model folder `dir`, reporting a SIGBUS meanwhile as the folder
/// changing underneath. One folder is read at a time (the commands load one model).
pub fn reading_folder<T>(dir: &Path, read: impl FnOnce() -> T) -> T {
    #[cfg(unix)]
    {
        let message = format!(
            "decider: a file of {} was truncated or changed while it was read (SIGBUS); the model folder must not change while it loads\n",
            dir.display()
        );
        let _guard = unix::SigbusReport::install(message);
        read()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        read()
    }
}

#[cfg(unix)]
mod unix {
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    /// The message the handler writes: set before the handler is installed, and leaked (one
    /// short string per load), so it is valid whenever the handler runs.
    static MESSAGE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
    static MESSAGE_LEN: AtomicUsize = AtomicUsize::new(0);

    /// The handler: only async-signal-safe calls (`write`, `_exit`).
    extern "C" fn report(_signal: libc::c_int) {
        let (message, len) = (MESSAGE.load(Ordering::SeqCst), MESSAGE_LEN.load(Ordering::SeqCst));
        // SAFETY: `message` points at `len` bytes leaked before the handler was installed.
        unsafe {
            libc::write(libc::STDERR_FILENO, message.cast(), len);
            libc::_exit(1);
        }
    }

    /// The SIGBUS handler in place until dropped, when the previous one comes back.
    pub(super) struct SigbusReport {
        previous: libc::sigaction,
    }

    impl SigbusReport {
        pub(super) fn install(message: String) -> Self {
            let message: &'static mut [u8] = message.into_bytes().leak();
            MESSAGE_LEN.store(message.len(), Ordering::SeqCst);
            MESSAGE.store(message.as_mut_ptr(), Ordering::SeqCst);
            // SAFETY: `sigaction` is given a zeroed (valid) struct with the handler's address and an
            // emptied mask; `previous` receives the handler in place before.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = report as extern "C" fn(libc::c_int) as libc::sighandler_t;
                libc::sigemptyset(&mut action.sa_mask);
                let mut previous: libc::sigaction = std::mem::zeroed();
                libc::sigaction(libc::SIGBUS, &action, &mut previous);
                Self { previous }
            }
        }
    }

    impl Drop for SigbusReport {
        fn drop(&mut self) {
            // SAFETY: restores the handler `install` replaced, as `sigaction` returned it.
            unsafe {
                libc::sigaction(libc::SIGBUS, &self.previous, std::ptr::null_mut());
            }
        }
    }
}
