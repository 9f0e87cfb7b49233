#![no_std]
// This crate is a binary for bpfel-unknown-none; the empty library lets the host-side build script
// of gateway-observer depend on it, so cargo rebuilds the object when these sources change.
