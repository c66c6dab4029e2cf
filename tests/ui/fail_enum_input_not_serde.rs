use lq_runtime::Job;

#[derive(Job)]
enum Action {
    Start,
    Stop,
}

fn main() {}
