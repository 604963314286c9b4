//! Lcores: threads registered with a unique small id, and pinned thread launch.
//!
//! A thread that [`register`]s becomes an *lcore* and receives the lowest free id
//! in `0..MAX_LCORES`. The id is kept in a thread-local, so [`current`] is one
//! load; per-core state (a mempool's per-lcore caches, per-lcore counters) is an
//! array indexed by it. Threads that are not lcores get `None` and take the
//! slow, shared path of such structures.
//!
//! The id is held by an [`LcoreGuard`]; dropping the guard gives the id back,
//! after moving the free elements in the lcore's mempool caches to their
//! pools' rings (so they never wait in the cache of an lcore that is gone). An
//! id is handed from one thread to the next with release/acquire ordering (see
//! [`LcoreGuard`]), so a new owner of id `k` sees everything the previous owner
//! of `k` wrote to per-lcore state before it let go.
//!
//! [`launch`] starts a named thread (`lcore-N`), pins it to a CPU when asked,
//! registers it and runs a closure on it; [`launch_all`] starts several at once,
//! all or nothing.
//!
//! ```
//! use sluice::lcore;
//!
//! let handle = lcore::launch(None, || lcore::current()).unwrap();
//! let id = handle.lcore_id();
//! assert_eq!(handle.join().unwrap(), Some(id));
//! ```

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;

use crate::sync::{AtomicU64, Ordering};

/// Maximum number of lcores registered at once; ids are `0..MAX_LCORES`.
pub const MAX_LCORES: usize = 128;

/// Number of 64-bit words in the id bitmap.
const WORDS: usize = MAX_LCORES / 64;
const _: () = assert!(MAX_LCORES.is_multiple_of(64) && MAX_LCORES > 0);
const _: () = assert!(MAX_LCORES < NO_LCORE as usize);

/// Thread-local sentinel meaning "this thread is not an lcore".
const NO_LCORE: u32 = u32::MAX;

#[cfg(not(loom))]
std::thread_local! {
    /// The calling thread's lcore id, or [`NO_LCORE`]. `const`-initialised and
    /// without a destructor, so an access is a plain TLS load (no lazy-init check).
    static LCORE_ID: Cell<u32> = const { Cell::new(NO_LCORE) };
}

#[cfg(loom)]
loom::thread_local! {
    static LCORE_ID: Cell<u32> = Cell::new(NO_LCORE);
}

/// The calling thread's lcore id, or `None` when it is not registered.
///
/// One thread-local load and a compare.
#[inline(always)]
pub fn current() -> Option<usize> {
    let id = LCORE_ID.with(Cell::get);
    if id == NO_LCORE {
        None
    } else {
        Some(id as usize)
    }
}

/// The calling thread's lcore id as an index, or an index past every table
/// of lcores (`u32::MAX`) when it is not registered: a lookup in a table
/// of [`MAX_LCORES`] entries then needs one bounds check and no other test.
///
/// One thread-local load.
#[inline(always)]
pub(crate) fn current_index() -> usize {
    LCORE_ID.with(Cell::get) as usize
}

/// Why an lcore could not be registered, pinned or launched.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LcoreError {
    /// The calling thread is already registered, with this id.
    AlreadyRegistered(usize),
    /// All [`MAX_LCORES`] ids are taken.
    Exhausted,
    /// The CPU is not one this process may run on.
    CpuUnavailable {
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs the process may run on (see [`available_cpus`]).
        available: Vec<usize>,
    },
    /// `sched_setaffinity` refused to pin the thread to the CPU.
    Pin {
        /// The CPU asked for.
        cpu: usize,
        /// The OS error number.
        errno: i32,
    },
    /// The thread could not be spawned.
    Spawn {
        /// The name the thread was to have.
        name: String,
        /// The OS's reason.
        reason: String,
    },
}

impl fmt::Display for LcoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::AlreadyRegistered(id) => {
                write!(f, "this thread is already registered as lcore {id}")
            }
            Self::Exhausted => write!(f, "all {MAX_LCORES} lcore ids are taken"),
            Self::CpuUnavailable { cpu, available } => write!(
                f,
                "cpu {cpu} is not available to this process (available cpus: {})",
                cpu_list(available)
            ),
            Self::Pin { cpu, errno } => write!(
                f,
                "cannot pin the thread to cpu {cpu}: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
            Self::Spawn { name, reason } => write!(f, "cannot spawn thread {name}: {reason}"),
        }
    }
}

impl std::error::Error for LcoreError {}

/// Formats a sorted CPU list compactly: `0-3,6,8-9`; `none` when empty.
fn cpu_list(cpus: &[usize]) -> String {
    if cpus.is_empty() {
        return "none".to_owned();
    }
    let mut out = String::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// A lock-free bitmap of `MAX_LCORES` ids; a set bit is a taken id.
struct IdMap {
    words: [AtomicU64; WORDS],
}

impl IdMap {
    #[cfg(not(loom))]
    const fn new() -> Self {
        Self {
            words: [const { AtomicU64::new(0) }; WORDS],
        }
    }

    #[cfg(loom)]
    fn new() -> Self {
        Self {
            words: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Claims the lowest id that is free when its word is looked at.
    ///
    /// `None` when every word was seen full. Words are scanned in order, so an
    /// id freed in a word already passed is not seen; that only matters when
    /// the map is within a hair of full.
    fn claim(&self) -> Option<usize> {
        for (w, word) in self.words.iter().enumerate() {
            let mut seen = word.load(Ordering::Relaxed);
            while seen != u64::MAX {
                let bit = (!seen).trailing_zeros() as usize;
                // Acquire on success pairs with the Release in `release`: the
                // previous owner's writes to per-lcore state indexed by this id
                // happen-before everything the new owner does with it. (The
                // fetch_and is a read-modify-write, so any CAS on this word that
                // reads a later value still reads from its release sequence.)
                // Failure only re-reads the word: Relaxed.
                match word.compare_exchange_weak(
                    seen,
                    seen | (1 << bit),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(w * 64 + bit),
                    Err(now) => seen = now,
                }
            }
        }
        None
    }

    /// Gives `id` back.
    fn release(&self, id: usize) {
        debug_assert!(id < MAX_LCORES);
        // Release pairs with the Acquire of the CAS in `claim`: every write the
        // owner made while holding the id is visible to the next owner.
        let prev = self.words[id / 64].fetch_and(!(1u64 << (id % 64)), Ordering::Release);
        debug_assert!(prev & (1 << (id % 64)) != 0, "lcore id {id} was not taken");
    }
}

#[cfg(not(loom))]
static IDS: IdMap = IdMap::new();

#[cfg(loom)]
loom::lazy_static! {
    static ref IDS: IdMap = IdMap::new();
}

/// An id taken from [`IDS`] but not yet installed on a thread. `Send`, so a
/// launcher can claim the id (and name the thread after it) before spawning.
/// Dropping it gives the id back.
struct Claim {
    id: usize,
}

impl Claim {
    fn new() -> Result<Self, LcoreError> {
        IDS.claim()
            .map(|id| Self { id })
            .ok_or(LcoreError::Exhausted)
    }

    /// Makes the id the calling thread's lcore id.
    fn install(self) -> Result<LcoreGuard, LcoreError> {
        if let Some(id) = current() {
            return Err(LcoreError::AlreadyRegistered(id));
        }
        let id = self.id;
        std::mem::forget(self);
        LCORE_ID.with(|c| c.set(id as u32));
        // The first access registers the thread-exit release.
        #[cfg(not(loom))]
        let _ = EXIT_RELEASE.try_with(|_| ());
        Ok(LcoreGuard {
            id,
            _not_send: PhantomData,
        })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        IDS.release(self.id);
    }
}

/// Proof that the calling thread is registered as lcore [`id`](Self::id).
///
/// Dropping it unregisters the thread, moves the free elements in its
/// mempool caches to their pools' rings, and frees the id (with Release
/// ordering, paired with the Acquire of the next [`register`] that claims it;
/// see the [module docs](self)). Unwinding from a panic drops it too. It is
/// `!Send`: an lcore id belongs to one thread.
///
/// If the guard is leaked (`mem::forget`), the thread stays registered until
/// it ends; then a thread-local destructor unregisters it as dropping the
/// guard would.
///
/// ```compile_fail
/// let guard = sluice::lcore::register().unwrap();
/// std::thread::spawn(move || drop(guard)); // error: `LcoreGuard` is not `Send`
/// ```
#[must_use = "dropping the guard unregisters the thread at once"]
pub struct LcoreGuard {
    id: usize,
    _not_send: PhantomData<*const ()>,
}

impl LcoreGuard {
    /// The lcore id this guard holds.
    #[inline]
    pub fn id(&self) -> usize {
        self.id
    }
}

impl fmt::Debug for LcoreGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LcoreGuard").field("id", &self.id).finish()
    }
}

impl Drop for LcoreGuard {
    fn drop(&mut self) {
        // The thread still holds the id unless its thread-exit release ran
        // first (the guard lives in a thread-local destroyed after it).
        if current() == Some(self.id) {
            unregister(self.id);
        }
    }
}

/// Unregisters the calling thread, which holds lcore id `id`: gives back
/// what its mempool caches hold, then the id.
fn unregister(id: usize) {
    LCORE_ID.with(|c| c.set(NO_LCORE));
    // SAFETY: the id is still ours, and is released only below.
    unsafe { crate::mempool::release_lcore(id) };
    IDS.release(id);
}

/// Unregisters a thread that ends still registered: its guard was leaked
/// (`mem::forget`) or lives in a thread-local destroyed after this one.
#[cfg(not(loom))]
struct ExitRelease;

#[cfg(not(loom))]
impl Drop for ExitRelease {
    fn drop(&mut self) {
        if let Some(id) = current() {
            unregister(id);
        }
    }
}

#[cfg(not(loom))]
std::thread_local! {
    /// Registered (first touched) when the thread becomes an lcore; its
    /// destructor runs when the thread ends.
    static EXIT_RELEASE: ExitRelease = const { ExitRelease };
}

/// Registers the calling thread as an lcore with the lowest free id.
///
/// Errors: [`LcoreError::AlreadyRegistered`] if the thread already is one (its
/// registration is left as it was), [`LcoreError::Exhausted`] if all
/// [`MAX_LCORES`] ids are taken.
///
/// ```
/// use sluice::lcore;
///
/// let guard = lcore::register().unwrap();
/// assert_eq!(lcore::current(), Some(guard.id()));
/// drop(guard);
/// assert_eq!(lcore::current(), None);
/// ```
pub fn register() -> Result<LcoreGuard, LcoreError> {
    if let Some(id) = current() {
        return Err(LcoreError::AlreadyRegistered(id));
    }
    Claim::new()?.install()
}

#[cfg(not(loom))]
pub use self::threads::{
    LcoreHandle, available_cpus, launch, launch_all, launch_many, pin_current_thread,
};

#[cfg(not(loom))]
mod threads {
    use std::sync::OnceLock;
    use std::sync::mpsc;
    use std::thread;

    use super::{Claim, LcoreError};

    /// The CPUs this process may run on, ascending.
    ///
    /// Read once, from `sched_getaffinity` of the first thread that asks
    /// ([`pin_current_thread`] and the launchers ask before pinning anything), so
    /// pinning threads later does not shrink it. Never empty: if the mask cannot be
    /// read, `0..available_parallelism` is assumed.
    pub fn available_cpus() -> Vec<usize> {
        static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
        CPUS.get_or_init(read_affinity).clone()
    }

    #[cfg(target_os = "linux")]
    fn read_affinity() -> Vec<usize> {
        // SAFETY: `cpu_set_t` is a plain bit array, for which all-zero is a valid
        // (empty) value.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable `cpu_set_t` and the size passed is
        // its size; pid 0 means the calling thread.
        let rc =
            unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
        if rc != 0 {
            return fallback_cpus();
        }
        let cpus: Vec<usize> = (0..cpu_set_size())
            // SAFETY: `cpu < CPU_SETSIZE`, the number of bits in `set`.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
            .collect();
        if cpus.is_empty() {
            fallback_cpus()
        } else {
            cpus
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn read_affinity() -> Vec<usize> {
        fallback_cpus()
    }

    fn fallback_cpus() -> Vec<usize> {
        let n = thread::available_parallelism().map_or(1, |n| n.get());
        (0..n).collect()
    }

    /// Number of CPUs a `cpu_set_t` can name.
    #[cfg(target_os = "linux")]
    fn cpu_set_size() -> usize {
        8 * std::mem::size_of::<libc::cpu_set_t>()
    }

    /// `Ok` when `cpu` is one of [`available_cpus`].
    fn check_cpu(cpu: usize) -> Result<(), LcoreError> {
        let available = available_cpus();
        if available.binary_search(&cpu).is_ok() {
            Ok(())
        } else {
            Err(LcoreError::CpuUnavailable { cpu, available })
        }
    }

    /// Pins the calling thread to `cpu` (`sched_setaffinity`).
    ///
    /// Errors: [`LcoreError::CpuUnavailable`] if `cpu` is not one of
    /// [`available_cpus`], [`LcoreError::Pin`] if the kernel refuses.
    pub fn pin_current_thread(cpu: usize) -> Result<(), LcoreError> {
        check_cpu(cpu)?;
        set_affinity(cpu)
    }

    #[cfg(target_os = "linux")]
    fn set_affinity(cpu: usize) -> Result<(), LcoreError> {
        if cpu >= cpu_set_size() {
            return Err(LcoreError::Pin {
                cpu,
                errno: libc::EINVAL,
            });
        }
        // SAFETY: all-zero is a valid (empty) `cpu_set_t`.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `cpu < CPU_SETSIZE` was checked above, so the bit is in `set`.
        unsafe { libc::CPU_SET(cpu, &mut set) };
        // SAFETY: `set` is a valid `cpu_set_t` of the size passed; pid 0 means the
        // calling thread.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
        if rc == 0 {
            Ok(())
        } else {
            let errno = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            Err(LcoreError::Pin { cpu, errno })
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn set_affinity(cpu: usize) -> Result<(), LcoreError> {
        Err(LcoreError::Pin {
            cpu,
            errno: libc::ENOSYS,
        })
    }

    /// A launched lcore thread; [`join`](Self::join) waits for its result.
    #[derive(Debug)]
    pub struct LcoreHandle<R> {
        lcore_id: usize,
        cpu: Option<usize>,
        join: thread::JoinHandle<R>,
    }

    impl<R> LcoreHandle<R> {
        /// The lcore id the thread runs as (also in its name, `lcore-N`).
        pub fn lcore_id(&self) -> usize {
            self.lcore_id
        }

        /// The CPU the thread is pinned to, if it was pinned.
        pub fn cpu(&self) -> Option<usize> {
            self.cpu
        }

        /// The underlying thread.
        pub fn thread(&self) -> &thread::Thread {
            self.join.thread()
        }

        /// Whether the thread has finished.
        pub fn is_finished(&self) -> bool {
            self.join.is_finished()
        }

        /// Waits for the thread and returns the closure's result; `Err` holds the
        /// panic payload if the closure panicked (as [`thread::JoinHandle::join`]).
        /// The lcore id is free again once this returns.
        pub fn join(self) -> thread::Result<R> {
            self.join.join()
        }
    }

    /// A thread that is set up (pinned, registered) and waits for the word to run.
    struct Pending<R> {
        handle: LcoreHandle<R>,
        go: mpsc::SyncSender<bool>,
    }

    /// Spawns `lcore-N`, pins and registers it, and returns once it is set up.
    /// The closure runs only after `true` is sent on `go`; on `false` (or if `go`
    /// is dropped) the thread exits without running it.
    fn spawn_gated<F, R>(cpu: Option<usize>, f: F) -> Result<Pending<R>, LcoreError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        if let Some(cpu) = cpu {
            check_cpu(cpu)?;
        }
        let claim = Claim::new()?;
        let lcore_id = claim.id;
        let name = format!("lcore-{lcore_id}");
        let (setup_tx, setup_rx) = mpsc::sync_channel::<Result<(), LcoreError>>(1);
        let (go_tx, go_rx) = mpsc::sync_channel::<bool>(1);
        let body = move || -> R {
            let setup = match cpu {
                Some(cpu) => super::pin_current_thread(cpu),
                None => Ok(()),
            }
            .and_then(|()| claim.install());
            let guard = match setup {
                Ok(guard) => guard,
                Err(e) => {
                    let _ = setup_tx.send(Err(e));
                    // Nobody joins this thread for a result: leave quietly
                    // (`resume_unwind` does not run the panic hook).
                    std::panic::resume_unwind(Box::new("lcore set-up failed"));
                }
            };
            let _ = setup_tx.send(Ok(()));
            if go_rx.recv() != Ok(true) {
                drop(guard);
                std::panic::resume_unwind(Box::new("lcore launch cancelled"));
            }
            let result = f();
            drop(guard);
            result
        };
        // If spawning fails the closure, and with it the claim, is dropped: the id
        // is given back.
        let join = thread::Builder::new()
            .name(name.clone())
            .spawn(body)
            .map_err(|e| LcoreError::Spawn {
                name: name.clone(),
                reason: e.to_string(),
            })?;
        let setup = setup_rx.recv().unwrap_or_else(|_| {
            Err(LcoreError::Spawn {
                name,
                reason: "the thread exited during set-up".to_owned(),
            })
        });
        match setup {
            Ok(()) => Ok(Pending {
                handle: LcoreHandle {
                    lcore_id,
                    cpu,
                    join,
                },
                go: go_tx,
            }),
            Err(e) => {
                let _ = join.join();
                Err(e)
            }
        }
    }

    /// Spawns a thread named `lcore-N`, pins it to `cpu` (if given), registers it
    /// as lcore `N` and runs `f` on it; the thread unregisters when `f` returns or
    /// panics.
    ///
    /// Set-up errors are reported here, before `f` runs: a CPU that is not
    /// available or cannot be pinned to, no free lcore id, or a failed spawn.
    ///
    /// ```
    /// use sluice::lcore;
    ///
    /// let cpu = lcore::available_cpus()[0];
    /// let h = lcore::launch(Some(cpu), move || 6 * 7).unwrap();
    /// assert_eq!(h.cpu(), Some(cpu));
    /// assert_eq!(h.join().unwrap(), 42);
    ///
    /// let err = lcore::launch(Some(100_000), || ()).unwrap_err();
    /// assert!(err.to_string().contains("cpu 100000"));
    /// ```
    pub fn launch<F, R>(cpu: Option<usize>, f: F) -> Result<LcoreHandle<R>, LcoreError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let pending = spawn_gated(cpu, f)?;
        // The receiver lives until it has received: this cannot fail.
        let _ = pending.go.send(true);
        Ok(pending.handle)
    }

    /// Launches one lcore per `(cpu, closure)` pair, all or nothing: every thread
    /// is spawned, pinned and registered before any closure runs, and if one
    /// fails, none runs, the threads already started exit, and the error is
    /// returned.
    ///
    /// The closures share one type; box them (`Box<dyn FnOnce() -> R + Send>`)
    /// to launch different code on each core.
    pub fn launch_all<F, R, I>(jobs: I) -> Result<Vec<LcoreHandle<R>>, LcoreError>
    where
        I: IntoIterator<Item = (Option<usize>, F)>,
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let mut pending = Vec::new();
        for (cpu, f) in jobs {
            match spawn_gated(cpu, f) {
                Ok(p) => pending.push(p),
                Err(e) => {
                    for p in pending {
                        let _ = p.go.send(false);
                        let _ = p.handle.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok(pending
            .into_iter()
            .map(|p| {
                let _ = p.go.send(true);
                p.handle
            })
            .collect())
    }

    /// Launches one lcore pinned to each CPU of `cpus`, all or nothing (as
    /// [`launch_all`]); the one on `cpus[i]` runs `f(i)`.
    ///
    /// ```
    /// use sluice::lcore;
    ///
    /// let cpus = lcore::available_cpus();
    /// let handles = lcore::launch_many(&cpus, |i| (i, lcore::current().is_some())).unwrap();
    /// for (i, h) in handles.into_iter().enumerate() {
    ///     assert_eq!(h.join().unwrap(), (i, true));
    /// }
    /// ```
    pub fn launch_many<F, R>(cpus: &[usize], f: F) -> Result<Vec<LcoreHandle<R>>, LcoreError>
    where
        F: Fn(usize) -> R + Send + Sync + 'static,
        R: Send + 'static,
    {
        let f = std::sync::Arc::new(f);
        launch_all(cpus.iter().enumerate().map(|(i, &cpu)| {
            let f = std::sync::Arc::clone(&f);
            (Some(cpu), move || f(i))
        }))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, Barrier};

    #[test]
    fn unregistered_thread_has_no_id() {
        std::thread::spawn(|| assert_eq!(current(), None))
            .join()
            .unwrap();
    }

    #[test]
    fn ids_are_unique_across_threads_at_once() {
        const N: usize = 8;
        let barrier = Arc::new(Barrier::new(N));
        let threads: Vec<_> = (0..N)
            .map(|_| {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    let guard = register().unwrap();
                    assert_eq!(current(), Some(guard.id()));
                    // Hold the id until every thread has one.
                    barrier.wait();
                    let id = guard.id();
                    barrier.wait();
                    id
                })
            })
            .collect();
        let ids: Vec<usize> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let distinct: HashSet<usize> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), N, "duplicate lcore ids: {ids:?}");
        assert!(ids.iter().all(|&id| id < MAX_LCORES));
    }

    #[test]
    fn drop_unregisters_and_registration_can_be_repeated() {
        std::thread::spawn(|| {
            let guard = register().unwrap();
            assert!(current().is_some());
            drop(guard);
            assert_eq!(current(), None);
            let again = register().unwrap();
            assert_eq!(current(), Some(again.id()));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn double_registration_is_an_error_and_keeps_the_first() {
        std::thread::spawn(|| {
            let guard = register().unwrap();
            let err = register().unwrap_err();
            assert_eq!(err, LcoreError::AlreadyRegistered(guard.id()));
            assert!(err.to_string().contains(&format!("lcore {}", guard.id())));
            assert_eq!(current(), Some(guard.id()));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn bitmap_gives_lowest_free_id_reuses_and_exhausts() {
        let map = IdMap::new();
        for expected in 0..MAX_LCORES {
            assert_eq!(map.claim(), Some(expected));
        }
        assert_eq!(map.claim(), None);
        map.release(70);
        map.release(3);
        assert_eq!(map.claim(), Some(3));
        assert_eq!(map.claim(), Some(70));
        assert_eq!(map.claim(), None);
        assert_eq!(
            LcoreError::Exhausted.to_string(),
            "all 128 lcore ids are taken"
        );
    }

    #[test]
    fn bitmap_claims_are_exclusive_under_contention() {
        let map = Arc::new(IdMap::new());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let map = Arc::clone(&map);
                std::thread::spawn(move || {
                    (0..MAX_LCORES / 4)
                        .map(|_| map.claim().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<usize> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..MAX_LCORES).collect::<Vec<_>>());
        assert_eq!(map.claim(), None);
    }

    #[test]
    fn pinning_to_a_cpu_out_of_range_is_an_error() {
        for cpu in [100_000, usize::MAX] {
            let err = pin_current_thread(cpu).unwrap_err();
            assert!(matches!(err, LcoreError::CpuUnavailable { cpu: c, .. } if c == cpu));
            assert!(err.to_string().contains(&format!("cpu {cpu}")), "{err}");
        }
    }

    #[test]
    fn cpu_lists_are_compact() {
        assert_eq!(cpu_list(&[]), "none");
        assert_eq!(cpu_list(&[0]), "0");
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn available_cpus_is_sorted_and_not_empty() {
        let cpus = available_cpus();
        assert!(!cpus.is_empty());
        assert!(cpus.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn launch_registers_pins_names_and_releases() {
        let cpu = *available_cpus().last().unwrap();
        let h = launch(Some(cpu), move || {
            // SAFETY: `sched_getcpu` has no preconditions.
            let on = unsafe { libc::sched_getcpu() };
            let name = std::thread::current().name().map(str::to_owned);
            (current(), on, name)
        })
        .unwrap();
        let id = h.lcore_id();
        assert_eq!(h.cpu(), Some(cpu));
        let (seen, on, name) = h.join().unwrap();
        assert_eq!(seen, Some(id));
        assert_eq!(on, cpu as i32);
        assert_eq!(name.as_deref(), Some(format!("lcore-{id}").as_str()));
    }

    #[test]
    fn launch_propagates_panics_as_err() {
        let h = launch(None, || -> u32 { panic!("boom") }).unwrap();
        let payload = h.join().unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    }

    #[test]
    fn launch_on_an_unavailable_cpu_is_an_error_before_running() {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let err = launch(Some(100_000), move || flag.store(true, Ordering::SeqCst)).unwrap_err();
        assert!(matches!(
            err,
            LcoreError::CpuUnavailable { cpu: 100_000, .. }
        ));
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[test]
    fn launch_all_is_all_or_nothing() {
        let ran = Arc::new(AtomicBool::new(false));
        let good = available_cpus()[0];
        type Job = Box<dyn FnOnce() + Send>;
        let jobs: Vec<(Option<usize>, Job)> = vec![
            (Some(good), {
                let ran = Arc::clone(&ran);
                Box::new(move || ran.store(true, Ordering::SeqCst))
            }),
            (Some(100_000), {
                let ran = Arc::clone(&ran);
                Box::new(move || ran.store(true, Ordering::SeqCst))
            }),
        ];
        let err = launch_all(jobs).unwrap_err();
        assert!(matches!(
            err,
            LcoreError::CpuUnavailable { cpu: 100_000, .. }
        ));
        // The first thread was set up but told not to run, and has been joined.
        assert!(!ran.load(Ordering::SeqCst));
    }

    #[test]
    fn launch_many_runs_one_closure_per_cpu() {
        let cpus = available_cpus();
        let handles = launch_many(&cpus, |i| (i, current())).unwrap();
        let mut ids = HashSet::new();
        for (i, h) in handles.into_iter().enumerate() {
            let id = h.lcore_id();
            assert_eq!(h.cpu(), Some(cpus[i]));
            assert_eq!(h.join().unwrap(), (i, Some(id)));
            ids.insert(id);
        }
        assert_eq!(ids.len(), cpus.len());
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::{Arc, UnsafeCell};

    /// Two threads register, touch per-lcore state indexed by their id, and
    /// unregister; a third registers after one of them. Loom checks that ids are
    /// never shared and that the release/acquire hand-off orders the per-lcore
    /// state (it reports a data race on `state` otherwise).
    #[test]
    fn loom_lcore_ids_exclusive_and_handoff_ordered() {
        loom::model(|| {
            let state: Arc<[UnsafeCell<u64>; 2]> =
                Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)]);
            let worker = |state: Arc<[UnsafeCell<u64>; 2]>| {
                move || {
                    let guard = register().unwrap();
                    let id = guard.id();
                    assert!(id < 2, "lowest free id expected, got {id}");
                    assert_eq!(current(), Some(id));
                    // SAFETY: only the holder of lcore id `id` touches
                    // `state[id]`; loom verifies that claim.
                    state[id].with_mut(|p| unsafe { *p += 1 });
                    drop(guard);
                    assert_eq!(current(), None);
                }
            };
            let t1 = loom::thread::spawn(worker(Arc::clone(&state)));
            let t2 = loom::thread::spawn(worker(Arc::clone(&state)));
            t1.join().unwrap();
            worker(Arc::clone(&state))();
            t2.join().unwrap();
            // SAFETY: every thread that touched `state` has been joined.
            let total: u64 = state.iter().map(|c| c.with(|p| unsafe { *p })).sum();
            assert_eq!(total, 3);
        });
    }
}
