//! The SONAME rdma-core gives its preload library.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librspreload.so");
}
