fn main() -> std::process::ExitCode {
    tickswarm::cli::main()
}
