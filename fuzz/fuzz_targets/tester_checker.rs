//! The tester's checker over arbitrary frames. The first byte picks one of
//! four testers (UDP or TCP over IPv4 or IPv6; four flows, two streams each,
//! the default seed, so generated frames in the corpus stay valid); the rest
//! is the frame. Every frame checked is counted exactly once: received,
//! duplicate, corrupt or foreign.

#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use libfuzzer_sys::fuzz_target;
use sluice::tester::{Checker, L3, L4, Tester, TesterConfig};

struct Rig {
    tester: Arc<Tester>,
    checker: Checker,
    checked: u64,
}

static RIGS: OnceLock<Mutex<Vec<Rig>>> = OnceLock::new();

fn rigs() -> &'static Mutex<Vec<Rig>> {
    RIGS.get_or_init(|| {
        let kinds = [
            (L3::Ipv4, L4::Udp),
            (L3::Ipv4, L4::Tcp),
            (L3::Ipv6, L4::Udp),
            (L3::Ipv6, L4::Tcp),
        ];
        Mutex::new(
            kinds
                .into_iter()
                .map(|(l3, l4)| {
                    let tester = Tester::new(TesterConfig {
                        l3,
                        l4,
                        flows: 4,
                        ..TesterConfig::default()
                    });
                    tester.add_stream();
                    tester.add_stream();
                    let checker = tester.checker();
                    Rig {
                        tester,
                        checker,
                        checked: 0,
                    }
                })
                .collect(),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let [pick, frame @ ..] = data else {
        return;
    };
    let mut rigs = rigs().lock().unwrap_or_else(|e| e.into_inner());
    let rig = &mut rigs[usize::from(pick & 3)];
    rig.checker.check(frame);
    rig.checked += 1;
    let r = rig.tester.report();
    assert_eq!(
        r.received + r.duplicates + r.corrupt + r.foreign,
        rig.checked,
        "every frame is counted once: {r:?}"
    );
});
