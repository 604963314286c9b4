//! The tester's checker over arbitrary frames. The first byte picks one of
//! four testers (UDP or TCP over IPv4 or IPv6; four flows, two streams each,
//! the default seed); the rest is the frame. One tester is alive at a time,
//! made again when the pick changes, so its streams' stamp tags are 0 and 1
//! (tags are unique among the streams alive in the process, lowest first)
//! and generated frames in the corpus stay valid. Every frame checked is
//! counted exactly once: received, duplicate, corrupt or foreign.

#![no_main]

use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use sluice::tester::{Checker, L3, L4, Tester, TesterConfig};

struct Rig {
    pick: u8,
    tester: Arc<Tester>,
    checker: Checker,
    checked: u64,
}

impl Rig {
    fn new(pick: u8) -> Rig {
        let (l3, l4) = [
            (L3::Ipv4, L4::Udp),
            (L3::Ipv4, L4::Tcp),
            (L3::Ipv6, L4::Udp),
            (L3::Ipv6, L4::Tcp),
        ][usize::from(pick)];
        let tester = Tester::new(TesterConfig {
            l3,
            l4,
            flows: 4,
            ..TesterConfig::default()
        });
        // One tester is alive at a time: two of the 4096 stream tags.
        tester.add_stream().expect("a free stream tag");
        tester.add_stream().expect("a free stream tag");
        let checker = tester.checker();
        Rig {
            pick,
            tester,
            checker,
            checked: 0,
        }
    }
}

static RIG: Mutex<Option<Rig>> = Mutex::new(None);

fuzz_target!(|data: &[u8]| {
    let [pick, frame @ ..] = data else {
        return;
    };
    let pick = pick & 3;
    let mut slot = RIG.lock().unwrap_or_else(|e| e.into_inner());
    if slot.as_ref().is_none_or(|r| r.pick != pick) {
        // The old tester goes first, giving its streams' tags back.
        *slot = None;
        *slot = Some(Rig::new(pick));
    }
    let rig = slot.as_mut().expect("a rig was just made");
    rig.checker.check(frame);
    rig.checked += 1;
    let r = rig.tester.report();
    assert_eq!(
        r.received + r.duplicates + r.corrupt + r.foreign,
        rig.checked,
        "every frame is counted once: {r:?}"
    );
});
