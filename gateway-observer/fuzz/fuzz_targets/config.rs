//! The daemon's TOML config: any text is a config that passes its own validation or an error
//! that says why, never a panic.

#![no_main]

use gateway_observer::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else { return };
    match Config::from_toml(text) {
        Ok(config) => {
            assert!(config.validate().is_ok());
            for target in &config.targets {
                // What `run` prints and takes back.
                assert_eq!(target.to_string().parse().ok().as_ref(), Some(target), "{target:?}");
            }
        }
        Err(err) => assert!(!err.to_string().is_empty()),
    }
});
