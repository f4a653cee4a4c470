//! Compiles the RocketMQ 5 gRPC protos (`proto/apache/rocketmq/v2/`) when feature `grpc` is on.
//!
//! protox parses the `.proto` files in pure Rust (a fresh machine has no `protoc`), and
//! tonic-prost-build turns the descriptors into the prost messages and the tonic server trait
//! (and, with feature `bench` too, the client the bench's gRPC driver calls),
//! written to `OUT_DIR` and included by `src/grpc/mod.rs`. Without the feature this script does
//! nothing, so the engine and the remoting broker build exactly as before.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "grpc")]
    grpc::compile();
}

#[cfg(feature = "grpc")]
mod grpc {
    const PROTOS: [&str; 2] =
        ["proto/apache/rocketmq/v2/definition.proto", "proto/apache/rocketmq/v2/service.proto"];

    pub(super) fn compile() {
        for proto in PROTOS {
            println!("cargo:rerun-if-changed={proto}");
        }
        // A build script reports failure by panicking: there is no caller to return an error to.
        let descriptors = match protox::compile(PROTOS, ["proto"]) {
            Ok(descriptors) => descriptors,
            Err(error) => panic!("proto/: {error:?}"),
        };
        // The client half only for `baiji bench --driver grpc` (features grpc + bench): the
        // broker alone (feature grpc) builds exactly the server code.
        let generated = tonic_prost_build::configure()
            .build_client(cfg!(feature = "bench"))
            .build_server(true)
            .build_transport(false)
            .generate_default_stubs(true)
            .compile_fds(descriptors);
        if let Err(error) = generated {
            panic!("generating the gRPC code from proto/: {error}");
        }
    }
}
