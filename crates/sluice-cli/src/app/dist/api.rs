//! The distributor APIs the CLI drives, behind one small interface.
//!
//! [`Api`] names them (`burst`: the burst API with the best tag matching
//! this CPU runs; `burst-scalar`: the same with scalar matching; `single`:
//! the single-packet API). [`DistSide`] and [`WorkerSide`] are what
//! `sluice dist` and `sluice bench distributor` need of a distributor and
//! of a worker handle; [`Api::open`] makes the distributor and hands it to
//! a [`WithDist`] visitor, so the code that runs it is written once,
//! generic over the pair. An API is one arm in [`Api::open`] and two trait
//! impls here.

use std::sync::Arc;

use clap::ValueEnum;
use serde::Serialize;
use sluice::counter::Gauge;
use sluice::distributor::{
    DistError, DistStats, Distributor, DistributorConfig, MatchImpl, SingleDistributor,
    SingleWorker, Worker,
};
use sluice::mbuf::BurstSlice;

/// Room in a distributor's returns FIFO.
pub const RETURNS: usize = 1024;

/// A distributor API.
#[derive(ValueEnum, Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// The burst API, tag matching with the best SIMD this CPU runs (AVX2,
    /// SSE2; scalar elsewhere).
    Burst,
    /// The burst API with scalar tag matching.
    BurstScalar,
    /// The single-packet API (one packet per cache-line exchange).
    Single,
}

impl Api {
    /// Every API, burst (SIMD) first: the others' reference.
    pub const ALL: [Api; 3] = [Api::Burst, Api::BurstScalar, Api::Single];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Api::Burst => "burst",
            Api::BurstScalar => "burst-scalar",
            Api::Single => "single",
        }
    }

    /// `Ok` if this build and CPU run the API, else why not.
    pub fn check(self) -> Result<(), String> {
        struct Nothing;
        impl WithDist for Nothing {
            type Out = ();
            fn run<D: DistSide>(self, _d: D) {}
        }
        self.open(1, Nothing)
    }

    /// Makes a distributor of this API for `workers` workers and runs `f`
    /// with it.
    pub fn open<F: WithDist>(self, workers: usize, f: F) -> Result<F::Out, String> {
        let burst = |matching| {
            Distributor::new(DistributorConfig {
                workers,
                matching,
                returns: RETURNS,
            })
            .map_err(|e| e.to_string())
        };
        match self {
            Api::Burst => Ok(f.run(burst(None)?)),
            Api::BurstScalar => Ok(f.run(burst(Some(MatchImpl::Scalar))?)),
            Api::Single => Ok(f.run(
                SingleDistributor::with_returns(workers, RETURNS).map_err(|e| e.to_string())?,
            )),
        }
    }
}

/// Code that runs with any distributor API: [`Api::open`] calls `run` with
/// the distributor it made.
pub trait WithDist {
    /// What `run` gives back.
    type Out;
    /// Runs with `d`.
    fn run<D: DistSide>(self, d: D) -> Self::Out;
}

/// The distributor end, driven by one thread.
pub trait DistSide: Send + 'static {
    /// Its worker handles.
    type Worker: WorkerSide;
    /// The handle for worker `id` (one live handle per id).
    fn worker(&self, id: usize) -> Result<Self::Worker, String>;
    /// Hands packets from the front of `burst` to the workers; how many it
    /// took.
    fn process(&mut self, burst: &mut BurstSlice) -> usize;
    /// Moves returned packets into `out`, oldest first; how many.
    fn returned_pkts(&mut self, out: &mut BurstSlice) -> usize;
    /// Hands out everything queued and waits for the workers to return it
    /// all; what is still outstanding (0 = done).
    fn flush(&mut self) -> usize;
    /// The counters.
    fn stats(&self) -> DistStats;
    /// Workers that have asked for packets (and not shut down).
    fn active_workers(&self) -> usize;
    /// The tag matching in use (`avx2`, `sse2`, `scalar`), or `-` where
    /// there is none.
    fn matching(&self) -> &'static str;
    /// Packets it holds (outstanding and returns waiting) as of its last
    /// call, readable from any thread.
    fn held_gauge(&self) -> Arc<Gauge>;
}

/// A worker handle, held by the thread doing that worker's job.
pub trait WorkerSide: Send + 'static {
    /// Hands back the packets of `done` (it holds at most what the last
    /// call received) and waits for new ones, appended to `out` (room for
    /// [`BURST_SIZE`](sluice::distributor::BURST_SIZE)); how many came.
    /// [`DistError::Closed`] once the distributor is gone (the way a
    /// worker's loop ends here: dropping the distributor answers every
    /// waiting worker).
    fn get_pkt(&mut self, done: &mut BurstSlice, out: &mut BurstSlice) -> Result<usize, DistError>;
}

impl DistSide for Distributor {
    type Worker = Worker;

    fn worker(&self, id: usize) -> Result<Worker, String> {
        Distributor::worker(self, id).map_err(|e| e.to_string())
    }

    #[inline]
    fn process(&mut self, burst: &mut BurstSlice) -> usize {
        Distributor::process(self, burst)
    }

    #[inline]
    fn returned_pkts(&mut self, out: &mut BurstSlice) -> usize {
        Distributor::returned_pkts(self, out)
    }

    fn flush(&mut self) -> usize {
        Distributor::flush(self)
    }

    fn stats(&self) -> DistStats {
        Distributor::stats(self)
    }

    fn active_workers(&self) -> usize {
        Distributor::active_workers(self)
    }

    fn matching(&self) -> &'static str {
        Distributor::matching(self).name()
    }

    fn held_gauge(&self) -> Arc<Gauge> {
        Distributor::held_gauge(self)
    }
}

impl DistSide for SingleDistributor {
    type Worker = SingleWorker;

    fn worker(&self, id: usize) -> Result<SingleWorker, String> {
        SingleDistributor::worker(self, id).map_err(|e| e.to_string())
    }

    #[inline]
    fn process(&mut self, burst: &mut BurstSlice) -> usize {
        SingleDistributor::process(self, burst)
    }

    #[inline]
    fn returned_pkts(&mut self, out: &mut BurstSlice) -> usize {
        SingleDistributor::returned_pkts(self, out)
    }

    fn flush(&mut self) -> usize {
        SingleDistributor::flush(self)
    }

    fn stats(&self) -> DistStats {
        SingleDistributor::stats(self)
    }

    fn active_workers(&self) -> usize {
        SingleDistributor::active_workers(self)
    }

    fn matching(&self) -> &'static str {
        // One packet's tag against each worker's, in a loop.
        MatchImpl::Scalar.name()
    }

    fn held_gauge(&self) -> Arc<Gauge> {
        SingleDistributor::held_gauge(self)
    }
}

impl WorkerSide for SingleWorker {
    /// One packet each way: `done` holds at most the one the last call
    /// received.
    #[inline]
    fn get_pkt(&mut self, done: &mut BurstSlice, out: &mut BurstSlice) -> Result<usize, DistError> {
        let m = SingleWorker::get_pkt(self, done.pop())?;
        // `out` has room for eight: this cannot fail.
        let _ = out.push(m);
        Ok(1)
    }
}

impl WorkerSide for Worker {
    #[inline]
    fn get_pkt(&mut self, done: &mut BurstSlice, out: &mut BurstSlice) -> Result<usize, DistError> {
        Worker::get_pkt(self, done, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Name;
    impl WithDist for Name {
        type Out = (&'static str, usize);
        fn run<D: DistSide>(self, d: D) -> Self::Out {
            (d.matching(), d.active_workers())
        }
    }

    #[test]
    fn each_api_opens_its_distributor() {
        let (m, active) = Api::BurstScalar.open(3, Name).unwrap();
        assert_eq!((m, active), ("scalar", 0));
        let (m, _) = Api::Burst.open(1, Name).unwrap();
        assert_eq!(m, sluice::distributor::Matcher::best().imp().name());
        assert_eq!(
            Api::Burst.open(0, Name).unwrap_err(),
            "a distributor needs at least one worker"
        );
        let (m, _) = Api::Single.open(2, Name).unwrap();
        assert_eq!(m, "scalar");
        assert!(Api::ALL.iter().all(|a| a.check().is_ok()));
        let names: Vec<_> = Api::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(names, ["burst", "burst-scalar", "single"]);
        assert_eq!(
            serde_json::to_value(Api::BurstScalar).unwrap(),
            "burst-scalar"
        );
    }
}
