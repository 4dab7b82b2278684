"""The training prompts: short chat requests composed from templates, and the contamination check.

A trained drafter is measured on `specdec_core/prompts/*.jsonl`, so its training prompts must not be
those prompts or near copies of them: a drafter that has seen the benchmark's questions would report
an acceptance it does not have on new ones. The prompts here are written for this project (templates
× fillers, no outside text), in eight categories, in English and Chinese.

A run takes the first N prompts of `training_prompts(seed)`: each (category, language) pool is shuffled
with the seed, each category interleaves its pools two English to one Chinese, and the categories take
turns. Any prefix of the order therefore has every category in equal measure and about one third
Chinese, until a pool runs out (each has more than 120 prompts).
"""
from __future__ import annotations

import functools
import itertools
import random
import string
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..errors import SpecDecError
from ..suite import PROMPTS_DIR, load_prompts

CATEGORIES = ("chat", "qa", "how-to", "story", "code", "math", "translation", "summarisation")
LANGUAGES = ("en", "zh")
LANGUAGE_PATTERN = ("en", "en", "zh")  # the order within a category: about two thirds English
EVAL_DIR = PROMPTS_DIR
OVERLAP_THRESHOLD = 0.5  # a training prompt sharing this much of its 3-grams with an eval prompt is refused

# Every {name} in a template takes each value of FILLERS[name]: a template yields the product.
TEMPLATES: dict[tuple[str, str], tuple[str, ...]] = {
    ("chat", "en"): (
        "I feel {feeling} about {life_event}. Can you cheer me up and give me one idea to try?",
        "How can I {habit} when I {busy}?",
        "Could you recommend {gift} for {recipient}?",
        "I have {free_time} free {free_when}. What could I do {free_where}?",
        "Let's chat about {chat_topic}. What do you find interesting about it?",
        "My friend says {opinion}. Do you agree? Keep it friendly.",
    ),
    ("chat", "zh"): (
        "我最近对{zh_life_event}感到{zh_feeling}，你能给我一点建议吗？",
        "我平时{zh_busy}，怎样才能{zh_habit}？",
        "周末想和{zh_companion}一起{zh_weekend}，有什么好主意？",
        "请推荐一份适合{zh_recipient}的{zh_gift}。",
        "我的朋友说{zh_opinion}，你觉得呢？",
        "和你聊聊{zh_chat_topic}吧，你觉得它有什么意思？",
    ),
    ("qa", "en"): (
        "What is {concept}? Answer in {answer_size}.",
        "Explain {concept} to {audience}.",
        "Give two surprising facts about {concept}.",
        "Compare {pair} in a few sentences.",
    ),
    ("qa", "zh"): (
        "什么是{zh_concept}？请用{zh_answer_size}回答。",
        "请给{zh_audience}解释一下{zh_concept}。",
        "关于{zh_concept}，有哪些有趣的事实？",
    ),
    ("how-to", "en"): (
        "How do I {task}?",
        "List the steps to {task}{task_constraint}.",
        "What mistakes do people make when they try to {task}?",
        "Explain how to {task} in {step_count} steps.",
    ),
    ("how-to", "zh"): (
        "怎么{zh_task}？",
        "请一步一步地告诉我如何{zh_task}。",
        "第一次{zh_task}要注意什么？",
        "有没有{zh_task_constraint}{zh_task}的方法？",
    ),
    ("story", "en"): (
        "Tell a {story_style} tale of {character} who {event}.",
        "Write the opening paragraph of a story in which {character} {event}.",
        "Invent a fable about {character} with a moral about {moral}.",
    ),
    ("story", "zh"): (
        "请写一个小故事：{zh_character}{zh_event}。",
        "讲一个{zh_story_style}的故事，主角是{zh_character}。",
        "写一则关于{zh_character}的寓言，告诉孩子要{zh_moral}。",
    ),
    ("code", "en"): (
        "Write a {code_lang} function that {code_task}.",
        "Explain how you would write a program that {code_task}, then show it in {code_lang}.",
        "What does this Python expression return: `{py_expr}`? Explain why.",
    ),
    ("code", "zh"): (
        "用 {code_lang} 写一个函数，{zh_code_task}。",
        "请解释怎样写一个程序来{zh_code_task}，并给出 {code_lang} 代码。",
        "这个 Python 表达式的结果是什么：`{py_expr}`？为什么？",
    ),
    ("math", "en"): (
        "{name} reads {pages_per_day} pages a day. How many days does it take to finish a {book_pages}-page book?",
        "A recipe needs {grams} grams of flour for {servings} servings. How much flour is needed for {new_servings} servings?",
        "What is {percent}% of {amount}? Show the working.",
        "Is {number} a prime number? Explain how you checked.",
        "A cyclist rides at {speed} km/h for {hours} hours and then {more_km} more kilometres. How far does she ride in total?",
        "Simplify the fraction {numerator}/{denominator} and explain each step.",
        "Find x if {a}x - {b} = {c}.",
        "{name} saves {save} dollars every week. How many weeks until {name} can buy a bike that costs {price} dollars?",
    ),
    ("math", "zh"): (
        "{zh_name}每天读{pages_per_day}页书，一本{book_pages}页的书要读几天？",
        "{percent}% 的 {amount} 是多少？请写出计算过程。",
        "{number} 是质数吗？请说明理由。",
        "{zh_name}每周存{save}元，要买一辆{price}元的自行车需要几周？",
        "解方程：{a}x - {b} = {c}，并说明每一步。",
    ),
    ("translation", "en"): (
        "Translate into {target_language}: {sentence}",
        'How would you say "{sentence}" in {target_language}?',
        "Give a natural {target_language} translation of this sentence and explain one word choice: {sentence}",
    ),
    ("translation", "zh"): (
        "把这句话翻译成{zh_target_language}：{zh_sentence}",
        "“{zh_sentence}”用{zh_target_language}怎么说？",
        "请把这句英文翻译成中文：{sentence}",
    ),
    ("summarisation", "en"): (
        "{summary_request} {opening} {middle} {ending}",
    ),
    ("summarisation", "zh"): (
        "{zh_summary_request}{zh_opening}{zh_middle}",
        "{zh_summary_request}{zh_opening}{zh_ending}",
    ),
}

FILLERS: dict[str, tuple[str, ...]] = {
    # chat, en
    "feeling": ("nervous", "tired", "unsure", "excited", "stressed", "a bit lonely"),
    "life_event": ("starting a new job", "moving to another city", "my first half marathon", "a long flight next week",
                   "learning to drive", "giving a speech at my sister's wedding", "living alone for the first time",
                   "joining a new football club", "going back to university at forty", "adopting a rescue dog"),
    "habit": ("sleep better", "eat more vegetables", "read more books", "keep my room tidy", "make new friends",
              "drink less coffee", "practise the guitar", "call my parents more often", "stop checking my phone in bed",
              "walk more"),
    "busy": ("work night shifts", "have two small kids", "live in a tiny flat", "travel a lot for work",
             "study and work at the same time", "commute two hours a day"),
    "gift": ("a board game", "a houseplant", "a weekend activity", "a podcast", "a simple dinner to cook", "a birthday present"),
    "recipient": ("my grandfather", "a group of teenagers", "a busy nurse", "two friends on a rainy day", "a new neighbour",
                  "my cousin who loves space", "a colleague who is retiring", "a family with a baby"),
    "free_time": ("an hour", "two hours", "the whole afternoon"),
    "free_when": ("this Saturday", "tonight", "tomorrow morning"),
    "free_where": ("at home", "in the city centre", "near the river", "without spending money"),
    "chat_topic": ("rainy days", "old films", "cooking for friends", "city parks", "board games", "learning to swim",
                   "summer evenings", "collecting stamps", "train journeys", "street food", "birdwatching",
                   "handwritten letters", "night markets", "gardening on a balcony", "jazz music"),
    "opinion": ("getting up early beats staying up late", "holidays should be planned months ahead",
                "paper books are better than e-books", "weekends should be completely work-free",
                "cats are easier to keep than dogs", "languages are best learned as a child",
                "breakfast is the most important meal", "everyone should learn to cook five dishes",
                "small towns are nicer to live in than big cities", "video games can teach useful skills",
                "winter is the best season", "a tidy desk helps you think"),
    # qa, en
    "concept": ("gravity", "a black hole", "inflation in economics", "the water cycle", "an electric circuit",
                "a vaccine", "plate tectonics", "the immune system", "a volcano", "DNA", "the stock market",
                "a solar eclipse", "an earthquake", "the greenhouse effect", "a democracy", "the Roman Empire",
                "the printing press", "a glacier", "compound interest", "an atom", "magnetism", "the internet",
                "a rainforest", "evaporation", "a hurricane", "the human heart", "a telescope", "recycling",
                "the Silk Road", "a battery", "sound waves", "the Great Wall of China", "a coral reef", "friction",
                "a comet", "the Olympic Games", "a desert", "bacteria", "static electricity", "a leap year",
                "a suspension bridge", "the ozone layer", "a satellite", "an ecosystem", "the speed of light",
                "a compass", "a fossil", "an encyclopedia", "the metric system", "a food chain"),
    "answer_size": ("one sentence", "three sentences", "a short paragraph"),
    "audience": ("a curious child", "a history student", "someone who has never studied science", "my grandmother"),
    "pair": ("a lake and a pond", "a virus and a bacterium", "a comet and an asteroid", "a hill and a mountain",
             "a frog and a toad", "a city and a town", "a sea and an ocean", "a moth and a butterfly",
             "a crocodile and an alligator", "a novel and a short story", "a loan and a gift", "a meteor and a meteorite",
             "a monarchy and a republic", "a fruit and a vegetable", "a river and a canal"),
    # how-to, en
    "task": ("boil an egg", "change a bicycle tyre", "plant tomato seeds", "clean a cast iron pan", "write a thank-you note",
             "fold a paper plane", "set up a budget spreadsheet", "remove a coffee stain", "tie a tie", "back up my phone",
             "brew green tea", "hang a picture frame", "start a compost bin", "iron a shirt", "make a simple kite",
             "sharpen a kitchen knife", "wash a wool sweater", "repot a houseplant", "pack a suitcase",
             "build a small bookshelf", "bake banana bread", "unclog a sink", "teach a puppy to sit", "sew on a button",
             "organise a closet", "write a cover letter", "make cold brew coffee", "care for a cactus",
             "paint a wooden chair", "memorise a short poem", "fix a squeaky door", "set up a fish tank",
             "make yogurt at home", "learn to juggle", "keep bread fresh longer", "light a campfire safely",
             "wrap a present neatly", "defrost a freezer", "clean a laptop keyboard", "make a paper lantern"),
    "task_constraint": ("", " without special tools", " in under ten minutes", " on a tight budget"),
    "step_count": ("three", "five"),
    # story, en
    "story_style": ("funny", "gentle", "mysterious", "adventurous"),
    "character": ("a shy beekeeper", "an old fisherman", "a talking teapot", "a lonely astronaut", "a clumsy wizard",
                  "a brave mouse", "a retired pirate", "a young inventor", "a grumpy giant", "a tiny cloud",
                  "a homesick penguin", "a curious octopus", "a forgetful knight", "a street musician",
                  "a lost balloon", "a night-shift nurse"),
    "event": ("finds a map under the floorboards", "wakes up one morning able to fly", "must deliver a letter before sunset",
              "makes friends with a thunderstorm", "wins a contest by accident", "loses a very important key",
              "meets their future self", "builds a boat from old bottles", "has to guard a sleeping dragon egg",
              "opens a shop that sells dreams", "hears a song nobody else can hear", "swaps places with a statue"),
    "moral": ("honesty", "patience", "kindness", "teamwork", "courage"),
    # code, en and zh
    "code_lang": ("Python", "JavaScript", "Go", "Rust", "Java", "C"),
    "code_task": ("reverses a string", "counts the vowels in a sentence", "checks whether a year is a leap year",
                  "returns the largest number in a list", "removes duplicates from a list while keeping order",
                  "converts Celsius to Fahrenheit", "computes the nth Fibonacci number",
                  "checks if two words are anagrams", "flattens a nested list", "counts word frequencies in a text",
                  "finds the second smallest number in a list", "capitalises the first letter of every word",
                  "splits a list into chunks of size n", "returns the digits of a number as a list",
                  "checks whether a string has balanced brackets", "merges two dictionaries",
                  "computes the greatest common divisor of two numbers", "rotates a list by k positions",
                  "converts a number to Roman numerals", "generates all subsets of a small list",
                  "reads a CSV file and sums one column", "finds the longest word in a sentence",
                  "checks if a number is a power of two", "computes the running average of a list",
                  "removes all whitespace from a string", "returns the last n lines of a text file",
                  "counts how many times each letter appears", "sorts a list of names by their length",
                  "builds a multiplication table as a list of lists", "checks whether a number is a palindrome"),
    "py_expr": ("sorted('banana')", "[x * 2 for x in range(4)]", "'a,b,,c'.split(',')", "len({1, 2, 2, 3})",
                "list(zip('ab', [1, 2]))", "3 // 2 + 3 % 2", "'hello'[::-1]", "dict.fromkeys('ab', 0)",
                "sum(range(1, 5))", "max([3, 9, 4], key=lambda n: -n)", "bool([])", "'-'.join(['x', 'y', 'z'])",
                "list(map(str.upper, ['a', 'b']))", "round(2.675, 2)", "[1, 2, 3][-1]", "{'a': 1}.get('b', 5)",
                "list(range(10, 0, -3))", "'Py' * 3", "any(n > 5 for n in [1, 7])", "tuple(enumerate('hi'))"),
    # math, en and zh
    "name": ("Lena", "Omar", "Priya", "Jonas", "Mei", "Carlos"),
    "pages_per_day": ("12", "15", "18", "25", "30"),
    "book_pages": ("240", "300", "360", "450"),
    "grams": ("200", "250", "300", "450"),
    "servings": ("4", "6"),
    "new_servings": ("3", "9", "10"),
    "percent": ("15", "20", "35", "40", "65"),
    "amount": ("80", "120", "260", "640", "900"),
    "number": ("51", "53", "57", "61", "77", "83", "87", "91", "97", "101", "119", "121", "127", "133", "143", "149"),
    "speed": ("12", "15", "18", "24"),
    "hours": ("2", "3", "4"),
    "more_km": ("5", "8", "10"),
    "numerator": ("12", "18", "24", "36"),
    "denominator": ("48", "60", "90"),
    "a": ("2", "4", "5", "6"),
    "b": ("3", "8", "10"),
    "c": ("12", "20", "32"),
    "save": ("8", "12", "15", "20"),
    "price": ("96", "180", "240"),
    # translation, en and zh
    "target_language": ("Chinese", "French", "Spanish", "German", "Japanese"),
    "sentence": ("The museum closes early on Sundays.", "Could you open the window a little?",
                 "I forgot my umbrella at the office.", "Our neighbours are painting their fence blue.",
                 "The soup needs a little more salt.", "She has played the violin since she was six.",
                 "Please turn off the lights when you leave.", "We missed the bus, so we walked home.",
                 "This book is more interesting than the film.", "My phone battery is almost empty.",
                 "The children are building a snowman in the yard.", "How much does a ticket to the concert cost?",
                 "He drinks tea without sugar.", "The bridge was closed because of the storm.",
                 "I would like a table for two, please.", "They moved to a small village last year.",
                 "The cat is sleeping on the warm laptop.", "Can you help me carry these boxes?",
                 "The market sells fresh fish every Friday.", "I have never seen such a tall tree.",
                 "Let's meet at the corner café at ten.", "The printer on the second floor is broken.",
                 "My grandmother tells the best stories.", "It has been raining since yesterday evening.",
                 "Dinner will be ready in twenty minutes.", "We should water the garden tonight.",
                 "Where can I buy a map of the city?", "He lost his keys again this morning.",
                 "The shop around the corner sells old records.", "Our flight was delayed by two hours."),
    # summarisation, en
    "summary_request": ("Summarise this in one sentence:", "What is the main point of this short text?",
                        "Write a headline and a one-line summary for this:", "Sum up the following for a busy reader:"),
    "opening": ("Last spring the town of Elmfield opened a bike path along the old railway line.",
                "A small bakery in Porto started delivering bread by cargo bike.",
                "Students at Riverside School planted two hundred trees on a former car park.",
                "The city of Halden replaced its street lamps with low-energy lights.",
                "A retired teacher in Leeds began offering free chess lessons in the park.",
                "Researchers found that a common garden bird can remember hundreds of hiding places.",
                "A local theatre group performed a play written entirely by teenagers.",
                "The island ferry service added an evening crossing for commuters.",
                "A volunteer team repaired forty old bicycles and gave them to new arrivals.",
                "Farmers in the valley switched to drip irrigation to save water."),
    "middle": ("The project took eight months and was paid for by local donations.",
               "At first many people doubted the idea would work.",
               "Some residents complained about noise while the work was going on.",
               "Newspapers covered the story, and visitors came from nearby towns.",
               "The organisers say the hardest part was finding enough helpers.",
               "Early results show costs fell by about a fifth."),
    "ending": ("The organisers now hope other places will copy the plan.", "A second phase is planned for next year.",
               "Not everyone is convinced, but most people seem pleased.",
               "The team will publish a full report in the autumn.",
               "Similar projects are already being discussed elsewhere."),
    # chat, zh
    "zh_life_event": ("换工作", "搬到新城市", "第一次一个人旅行", "准备期末考试", "学开车", "在婚礼上致辞", "开始健身",
                      "养第一只小狗"),
    "zh_feeling": ("紧张", "迷茫", "焦虑", "兴奋", "有点累"),
    "zh_busy": ("工作很忙", "要照顾两个孩子", "经常出差", "上夜班", "一边上学一边打工"),
    "zh_habit": ("早点睡觉", "多吃蔬菜", "坚持读书", "少喝咖啡", "存下一些钱", "交到新朋友", "多运动"),
    "zh_companion": ("父母", "室友", "同事", "孩子", "老同学"),
    "zh_weekend": ("出去玩", "在家做饭", "找个安静的地方放松", "学一样新东西"),
    "zh_recipient": ("爷爷", "刚毕业的表妹", "喜欢运动的朋友", "新邻居", "老师", "同事的小孩"),
    "zh_gift": ("生日礼物", "小礼物", "书", "植物", "纪念品"),
    "zh_opinion": ("早起比熬夜好", "旅行应该提前计划", "纸质书比电子书好", "周末应该完全不工作", "养猫比养狗容易",
                   "学外语要从小开始"),
    "zh_chat_topic": ("下雨天", "做饭", "爬山", "老电影", "城市里的公园", "收集邮票", "夏天的夜晚", "骑自行车"),
    # qa, zh
    "zh_concept": ("万有引力", "黑洞", "通货膨胀", "水循环", "疫苗", "板块运动", "免疫系统", "火山", "基因", "日食",
                   "地震", "温室效应", "指南针", "印刷术", "冰川", "复利", "原子", "磁铁", "互联网", "热带雨林",
                   "月相", "台风", "心脏", "望远镜", "垃圾分类", "丝绸之路", "电池", "声音", "长城", "珊瑚礁"),
    "zh_answer_size": ("一句话", "三句话", "一小段话"),
    "zh_audience": ("小学生", "没学过科学的人", "我的奶奶"),
    # how-to, zh
    "zh_task": ("煮鸡蛋", "换自行车内胎", "种西红柿", "写感谢信", "折纸飞机", "去掉衣服上的咖啡渍", "备份手机照片",
                "泡一壶绿茶", "挂一幅画", "熨衬衫", "做一个简单的风筝", "磨菜刀", "给多肉植物换盆", "整理衣柜",
                "缝扣子", "做酸奶", "包饺子", "炒西红柿鸡蛋", "修理漏水的水龙头", "养一缸小鱼", "背一首短诗",
                "给小狗洗澡", "做一份旅行预算", "清洗空调滤网", "腌泡菜"),
    "zh_task_constraint": ("不用专门工具就能", "十分钟内", "省钱地"),
    # story, zh
    "zh_character": ("一只怕水的小鸭子", "一位老渔夫", "一个会说话的茶壶", "一位孤独的宇航员", "一个笨手笨脚的魔法师",
                     "一只勇敢的小老鼠", "一个退休的海盗", "一个年轻的发明家", "一朵小小的云", "一只想家的企鹅",
                     "一条好奇的章鱼", "一位健忘的骑士"),
    "zh_event": ("在地板下发现了一张地图", "一觉醒来会飞了", "必须在天黑前送一封信", "和一场暴风雨交了朋友",
                 "意外赢得了比赛", "丢了一把很重要的钥匙", "用旧瓶子造了一条船", "开了一家卖梦的小店"),
    "zh_story_style": ("温馨", "搞笑", "神秘"),
    "zh_moral": ("诚实", "耐心", "善良", "互相帮助", "勇敢"),
    # code, zh
    "zh_code_task": ("反转一个字符串", "统计一句话里的元音字母", "判断某一年是不是闰年", "找出列表中最大的数",
                     "去掉列表中的重复元素", "把摄氏度转换成华氏度", "计算第 n 个斐波那契数",
                     "判断两个单词是否由相同的字母组成", "统计一段文字中每个词出现的次数", "求两个数的最大公约数",
                     "把列表按固定大小分组", "判断括号是否配对", "合并两个字典", "把数字转换成罗马数字",
                     "找出句子中最长的单词", "判断一个数是不是 2 的幂", "删除字符串中的所有空格", "按名字长度排序",
                     "生成九九乘法表", "读取文本文件的最后十行"),
    # math, zh
    "zh_name": ("小明", "小红", "李华", "王芳"),
    # translation, zh
    "zh_target_language": ("英文", "法语", "日语"),
    "zh_sentence": ("博物馆星期天关门比较早。", "你能把窗户开一点吗？", "我把伞忘在办公室了。", "这碗汤还需要一点盐。",
                    "她六岁就开始拉小提琴了。", "离开的时候请关灯。", "我们错过了公交车，只好走回家。",
                    "这本书比电影有意思。", "我的手机快没电了。", "孩子们在院子里堆雪人。", "音乐会的票多少钱？",
                    "他喝茶不加糖。", "因为暴风雨，桥被关闭了。", "请给我们一张两个人的桌子。",
                    "他们去年搬到了一个小村子。", "猫睡在暖和的电脑上。", "你能帮我搬这些箱子吗？",
                    "我从来没见过这么高的树。", "我们十点在街角的咖啡馆见面吧。", "二楼的打印机坏了。",
                    "从昨天晚上开始一直在下雨。", "晚饭二十分钟后就好。", "今晚我们应该给花园浇水。",
                    "他今天早上又把钥匙弄丢了。"),
    # summarisation, zh
    "zh_summary_request": ("请用一句话总结：", "这段话讲了什么？", "给这段话起个标题："),
    "zh_opening": ("小镇沿着旧铁路修了自行车道。", "一家面包店开始骑车送面包。", "学生们在旧停车场种了两百棵树。",
                   "城市把路灯都换成了节能灯。", "退休老师在公园免费教下棋。", "剧团演了一部中学生写的戏。",
                   "志愿者修好了四十辆旧自行车。", "农民改用滴灌来节约用水。"),
    "zh_middle": ("钱来自当地的捐款。", "一开始很多人不看好。", "有些居民抱怨噪音。", "最难的是找志愿者。"),
    "zh_ending": ("明年还有第二期。", "大多数人很满意。", "秋天会发布报告。", "别的城市也想学。"),
}


@dataclass(frozen=True)
class TrainingPrompt:
    index: int  # place in the seeded order: a run of N prompts takes indices 0 .. N-1
    category: str
    language: str
    text: str


def expand(template: str) -> list[str]:
    """Every filling of a template's {fields} (a field used twice takes the same value both times)."""
    fields = list(dict.fromkeys(name for _, name, _, _ in string.Formatter().parse(template) if name))
    return [template.format(**dict(zip(fields, values))) for values in itertools.product(*(FILLERS[f] for f in fields))]


@functools.lru_cache(maxsize=1)
def prompt_pools() -> dict[tuple[str, str], tuple[str, ...]]:
    """(category, language) -> its distinct prompts, sorted (the order the seed shuffles)."""
    return {key: tuple(sorted({text for template in templates for text in expand(template)}))
            for key, templates in TEMPLATES.items()}


@functools.lru_cache(maxsize=4)
def training_prompts(seed: int = 0) -> tuple[TrainingPrompt, ...]:
    """All training prompts in the run order of `seed` (see the module docstring)."""
    rng = random.Random(seed)
    per_category = []
    for category in CATEGORIES:
        pools = {}
        for language in LANGUAGES:
            pool = list(prompt_pools()[category, language])
            rng.shuffle(pool)
            pools[language] = iter(pool)
        # Two English, one Chinese, ... until both pools are empty (then the other language fills in).
        pattern = itertools.cycle(LANGUAGE_PATTERN)
        merged = []
        while pools:
            language = next(pattern)
            if language in pools:
                text = next(pools[language], None)
                if text is None:
                    del pools[language]
                else:
                    merged.append((language, text))
        per_category.append([(category, language, text) for language, text in merged])
    # The categories take turns; a category that runs out drops out of the rotation.
    rotation = [item for row in itertools.zip_longest(*per_category) for item in row if item is not None]
    return tuple(TrainingPrompt(i, c, lang, text) for i, (c, lang, text) in enumerate(rotation))


# --- contamination ------------------------------------------------------------------------------


def trigrams(ids: Sequence[int]) -> set[tuple[int, int, int]]:
    return {tuple(ids[i:i + 3]) for i in range(len(ids) - 2)}


def trigram_overlap(train: set, held: set) -> float:
    """How much two prompts share, from their sets of distinct token 3-grams T (training) and E (eval):
    max(|T ∩ E| / |T|, |T ∩ E| / |E|). The first term catches a training prompt built from an eval
    prompt's pieces, the second an eval prompt contained in a longer training prompt. A prompt of fewer
    than 3 tokens has no 3-grams and overlaps nothing this way (`check_contamination` also compares the
    texts themselves)."""
    if not train or not held:
        return 0.0
    shared = len(train & held)
    return max(shared / len(train), shared / len(held))


@dataclass
class ContaminationReport:
    """The check of a training prompt list against every user turn of the eval prompt files."""

    threshold: float
    training_prompts: int
    eval_files: list[str]
    eval_turns: int
    pairs_checked: int
    max_overlap: float
    worst_training: str  # the training prompt of the largest overlap ("" when nothing overlaps at all)
    worst_eval: str  # where its partner is: file:id turn n
    worst_eval_text: str
    flagged: int  # training prompts at or above the threshold

    @property
    def ok(self) -> bool:
        return self.flagged == 0

    def refusal(self) -> str:
        return (f"{self.flagged} training prompt(s) overlap the eval prompts; worst: {self.worst_training!r} shares "
                f"{self.max_overlap:.0%} of its token 3-grams with {self.worst_eval} (limit {self.threshold:.0%})")

    def to_dict(self) -> dict:
        return asdict(self)


def normalised(text: str) -> str:
    """A text up to case and spacing: what counts as "the same prompt"."""
    return " ".join(text.split()).casefold()


@functools.lru_cache(maxsize=4)
def _eval_turns(tokenizer, eval_dir: Path) -> tuple[tuple[str, str, str, frozenset], ...]:
    """(where, text, normalised text, 3-grams) of every user turn of `eval_dir/*.jsonl`."""
    files = sorted(eval_dir.glob("*.jsonl"))
    if not files:
        raise SpecDecError(f"no eval prompt files (*.jsonl) in {eval_dir}")
    turns = [(f"{path.name}:{case.id} turn {t + 1}", text) for path in files for case in load_prompts(path)
             for t, text in enumerate(case.turns)]
    ids = tokenizer([t for _, t in turns], add_special_tokens=False)["input_ids"]
    return tuple((where, text, normalised(text), frozenset(trigrams(i))) for (where, text), i in zip(turns, ids))


def closest(texts: Sequence[str], tokenizer, eval_dir: Path = EVAL_DIR) -> list[tuple[float, str, str]]:
    """(overlap, where, eval text) of each text's closest eval user turn: `trigram_overlap` over the
    tokenizer's plain tokens (no chat template, no special tokens); an identical text (up to case and
    spacing) counts as overlap 1."""
    held = _eval_turns(tokenizer, eval_dir)
    out = []
    for text, ids in zip(texts, tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []):
        grams, norm = trigrams(ids), normalised(text)
        best = (0.0, "", "")
        for where, eval_text, eval_norm, eval_grams in held:
            overlap = 1.0 if norm == eval_norm else trigram_overlap(grams, eval_grams)
            if overlap > best[0]:
                best = (overlap, where, eval_text)
        out.append(best)
    return out


def overlaps(texts: Sequence[str], tokenizer, eval_dir: Path = EVAL_DIR) -> list[float]:
    """Each text's largest overlap with an eval prompt's user turn (`closest`)."""
    return [o for o, _, _ in closest(texts, tokenizer, eval_dir)]


def check_contamination(texts: Sequence[str], tokenizer, eval_dir: Path = EVAL_DIR,
                        threshold: float = OVERLAP_THRESHOLD) -> ContaminationReport:
    """Compare every training text with every user turn of `eval_dir/*.jsonl` (multi-turn prompts: each
    turn) by `closest`; the report counts those at or above `threshold`."""
    found = closest(texts, tokenizer, eval_dir)
    worst = max(range(len(found)), key=lambda i: found[i][0], default=None)
    overlap, where, eval_text = found[worst] if worst is not None else (0.0, "", "")
    held = len(_eval_turns(tokenizer, eval_dir))
    return ContaminationReport(threshold, len(texts), sorted(p.name for p in eval_dir.glob("*.jsonl")), held,
                               len(texts) * held, overlap, texts[worst] if worst is not None and overlap > 0 else "",
                               where, eval_text, sum(o >= threshold for o, _, _ in found))
