"""The notebook workbench: widgets (workbench.py) over plain run logic (runner.py) and views (views.py)."""
