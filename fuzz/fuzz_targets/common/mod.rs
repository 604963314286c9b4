//! Support shared by the fuzz targets.

use sluice::net::routes::{self, RoutesFile};

/// Parses `data` as a routes file: any bytes give a file or an error of
/// bounded length, never a panic; a file's text form (its route lines,
/// then its flow lines) reads back as the same file. `None` for an error.
pub fn parse_routes_and_reread(data: &[u8]) -> Option<RoutesFile> {
    let file = match routes::parse(data) {
        Ok(file) => file,
        Err(e) => {
            assert!(e.to_string().chars().count() <= 512, "{e}");
            return None;
        }
    };
    let text: String = file
        .routes
        .iter()
        .map(|r| format!("{r}\n"))
        .chain(file.flows.iter().map(|f| format!("{f}\n")))
        .collect();
    assert_eq!(routes::parse(&text).expect("own text"), file);
    Some(file)
}
