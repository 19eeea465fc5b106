from conftest import run_recipe, launch, read_metrics
def test_dpo(tmp_path):
    r = run_recipe("dpo.yaml", tmp_path / "o")
    assert r["steps"] == 4
def test_ddp(tmp_path):
    launch("ddp_2proc.yaml", "dpo.yaml", tmp_path / "d")
    import json; print(json.loads((tmp_path/"d"/"final_results.json").read_text()))
def test_z3(tmp_path):
    launch("zero3_2proc.yaml", "dpo.yaml", tmp_path / "z")
    import json; print(json.loads((tmp_path/"z"/"final_results.json").read_text()))
