use lq_runtime::Job;

#[derive(Job)]
struct SendWelcomeEmail {
    user_id: i64,
}

fn main() {}
