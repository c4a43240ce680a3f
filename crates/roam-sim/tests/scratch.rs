mod common;
use common::{DynShape, dynamic_case, finals};
use roam_sim::{Consistency, Sim, check_linearizable};
#[test]
fn scratch() {
    let seed: u64 = std::env::var("S").unwrap().parse().unwrap();
    let case = dynamic_case(seed, DynShape { ops_per_phase: 10, ..DynShape::default() });
    let mut sim = Sim::new(case.cfg.clone());
    for (w, s) in case.scripts { sim.add_script(w, s); }
    sim.run_until_idle().unwrap();
    eprintln!("{:?}", case.cfg);
    let f = finals(&sim);
    let opts = Consistency { max_states: 300_000, program_order: std::env::var_os("PO").is_some() };
    match check_linearizable(sim.history(), opts, Some(&f)) { Ok(r) => eprintln!("ok {r:?}"), Err(e) => { let mut e = e; e.context = e.context.replace("\n  #", "\n#"); eprintln!("{}", e) } }
}
