//! The process-wide limit on tester streams, in a process of its own (it
//! takes every stream tag, which would starve any test running beside it).

use std::sync::Arc;

use sluice::mbuf::{MbufPool, MbufPoolConfig};
use sluice::port::{PortConfig, PortError};
use sluice::tester::{MAX_STREAMS, Tester, TesterConfig, TesterError};

fn small_tester() -> Arc<Tester> {
    Tester::new(TesterConfig {
        flows: 1,
        ..TesterConfig::default()
    })
}

#[test]
fn a_stream_past_the_limit_is_an_error_and_a_dropped_tester_frees_its_tags() {
    let first = small_tester();
    let rest = small_tester();
    for k in 0..MAX_STREAMS {
        let t = if k < 16 { &first } else { &rest };
        assert!(t.add_stream().is_ok(), "stream {k}");
    }
    let late = small_tester();
    assert_eq!(late.add_stream(), Err(TesterError::TooManyStreams));
    assert_eq!(
        TesterError::TooManyStreams.to_string(),
        format!("tester: a process has at most {MAX_STREAMS} tester streams alive at once")
    );
    // A soft port on a tester takes a stream when it is set up: refused
    // with a clear error, not a panic.
    let pool = MbufPool::new(MbufPoolConfig {
        size: 255,
        cache_size: 0,
        ..Default::default()
    })
    .unwrap();
    let err = sluice::driver::open(
        "soft:tester=limit-test",
        PortConfig::new(Some(pool.clone())).nb_rxd(64).nb_txd(64),
    )
    .unwrap_err();
    assert!(matches!(err, PortError::Config(_)), "{err:?}");
    assert!(
        err.to_string()
            .contains(&format!("at most {MAX_STREAMS} tester streams")),
        "{err}"
    );
    assert!(pool.is_full());
    // The first tester's 16 tags come back with it.
    drop(first);
    for _ in 0..16 {
        assert!(late.add_stream().is_ok());
    }
    assert_eq!(late.add_stream(), Err(TesterError::TooManyStreams));
}
