use lq_runtime::Job;

#[derive(Job)]
union Bits {
    int: u32,
    float: f32,
}

fn main() {}
