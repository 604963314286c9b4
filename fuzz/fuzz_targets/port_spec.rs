//! Port spec strings: the syntax ([`PortSpec::parse`]), the printed form
//! parsing back to the same spec, and every driver's reading of its keys
//! ([`sluice::driver::check_spec`], which opens nothing).

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::port::PortSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match PortSpec::parse(text) {
        Ok(spec) => {
            let again = PortSpec::parse(&spec.to_string()).expect("a printed spec parses");
            assert_eq!(again.driver(), spec.driver());
            assert_eq!(again.args(), spec.args());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    match sluice::driver::check_spec(text) {
        Ok(spec) => assert_eq!(spec.as_str(), text.trim()),
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
