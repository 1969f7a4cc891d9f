fn main() {
    println!("pocketperf {}", env!("CARGO_PKG_VERSION"));
}
