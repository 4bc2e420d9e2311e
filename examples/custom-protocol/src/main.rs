//! The whole tickswarm command line, with Skirmish beside the built-in protocols.
fn main() -> std::process::ExitCode {
    tickswarm::main_with(&[&skirmish_swarm::Skirmish])
}
