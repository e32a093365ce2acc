+ dcc_flow 0.1.0 .
PYTHONPATH +:= site-packages
