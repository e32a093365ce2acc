+ PLATFORM:linux dcc_flow 0.1.0 .
PYTHONPATH +:= linux/site-packages
+ PLATFORM:win64 dcc_flow 0.1.0 .
PYTHONPATH +:= win64/site-packages
+ PLATFORM:mac dcc_flow 0.1.0 .
PYTHONPATH +:= mac/site-packages
