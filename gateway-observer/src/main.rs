fn main() {
    println!("{}", gateway_observer::EBPF_OBJECT.len());
}
