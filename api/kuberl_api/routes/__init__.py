"""The API's routes, one module per resource; the app (app.py) includes their routers."""
