from nlq2sql.cli import app

app()
