//! Testers by name: [`attach`] finds or creates one, [`registered`] lists
//! those alive. The registry holds weak references, so a tester lives while
//! something (a port, a command) holds it, and a name is free again once the
//! last holder is gone.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use super::{Tester, TesterConfig};

static REGISTRY: Mutex<Vec<(String, Weak<Tester>)>> = Mutex::new(Vec::new());

/// The tester called `name`: the live one, or a new one made with `config`
/// (the default when `None`). When one is alive and `config` is given and
/// differs from its configuration, the error names the tester and both
/// configurations.
pub fn attach(name: &str, config: Option<TesterConfig>) -> Result<Arc<Tester>, String> {
    let mut reg = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    reg.retain(|(_, w)| w.strong_count() > 0);
    if let Some(t) = reg
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, w)| w.upgrade())
    {
        return match config {
            Some(c) if Tester::new_config(c.clone()) != *t.config() => Err(format!(
                "tester '{name}' exists with {}, cannot attach with {c}",
                t.config()
            )),
            _ => Ok(t),
        };
    }
    let t = Tester::new(config.unwrap_or_default());
    reg.push((name.to_owned(), Arc::downgrade(&t)));
    Ok(t)
}

/// The testers alive now, with their names, in the order they were made.
pub fn registered() -> Vec<(String, Arc<Tester>)> {
    let reg = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    reg.iter()
        .filter_map(|(n, w)| w.upgrade().map(|t| (n.clone(), t)))
        .collect()
}
