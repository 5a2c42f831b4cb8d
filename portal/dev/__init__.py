"""Development scaffolding, kept out of the product apps: `make run`'s launcher (devserver, devstack), its demo
data (`manage.py setup_demo`) and the loopback test cluster's registration (`loopback`, `manage.py
register_test_clusters`). It may import any app; no product app imports it."""
