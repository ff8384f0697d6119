//! The codegen binary: coordinator, worker and client commands.
