//! tests/c/pinned.c on the library: a C program's registered memory as the kernel pins it
//! and reached as Rust programs' owned MRs are (issue 29, Deliver 2 and 3;
//! `docs/decisions.md`, "Registered pages on shared memory"). A malloc'd buffer written and
//! read by the peer with its bytes (neighbours on its pages intact); a registered buffer
//! the program unmapped still takes a remote WRITE with success, as on rxe, and is
//! deregistered; overlapping registrations survive each other's deregistration; a fork
//! child writes only its own copy. With direct reach on and off, the same lines.
//! `reach_stopped.rs` shows the C program's MR reached.

mod common;

const EXPECTED: &str = "\
heap buffer: registered yes
write: success, bytes ok
read: success, bytes ok
neighbours: the object before, the object after
dereg: 0
after dereg, the program's bytes: ok
munmap: 0
write after munmap: success
write into the old pages: success, the new mapping untouched
read back: success, bytes ok
dereg: 0
overlapping: registered
writes: success success, bytes ok
dereg m1: 0
writes: success success, bytes ok
dereg m3 m4: 0 0
read through m2: success, bytes ok
dereg m2: 0
the program's bytes: ok
fork child: exited 0
parent's pages after the child wrote its own: untouched
write after fork: success, bytes ok
dereg: 0
done
";

#[test]
fn a_c_programs_registered_memory_is_pinned_and_reached() {
    let test = "a_c_programs_registered_memory_is_pinned_and_reached";
    let Some((_dir, exe)) = common::build_c(test, "pinned", &[]) else { return };
    for reach in ["on", "off"] {
        let (o, e) = common::run_c(&exe, &[], reach, &[], test);
        assert_eq!(o, EXPECTED, "reach {reach}\n{e}");
    }
}
